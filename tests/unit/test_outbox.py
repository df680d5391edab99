"""The outboxes of scaler.core.outbox: results and printed output gathered as columns, taken as one message each (the
scheduler's outbox to a client, the agent's batch to the scheduler, the processor's batch to its agent)."""

from __future__ import annotations

import pytest

from scaler.core.common import InvariantError
from scaler.core.outbox import MeasuredResultColumns, OutputColumns, ResultColumns
from scaler.protocol.records import OUTPUT_ERROR, OUTPUT_STDERR, OUTPUT_STDOUT, TaskOutput, TaskResults

OK, ERROR = 0, 1


def test_forwarded_results_carry_no_profiling_columns_until_one_brings_them() -> None:
    outbox = ResultColumns()
    assert outbox.take() is None
    outbox.add(1, OK, b"a")
    outbox.add(2, ERROR, b"e")
    outbox.validate()
    assert outbox.take() == TaskResults([1, 2], bytes([OK, ERROR]), [b"a", b"e"])
    assert outbox.take() is None  # taken: empty again
    outbox.add(3, OK, b"c")
    outbox.add(4, OK, b"d", 120, 4096, 80)  # a profiled one: zeros for the result before it
    outbox.add(5, OK, b"e")
    outbox.validate()
    assert outbox.take() == TaskResults([3, 4, 5], bytes(3), [b"c", b"d", b"e"], [0, 120, 0], [0, 4096, 0], [0, 80, 0])
    outbox.add(6, OK, b"f")
    assert outbox.take() == TaskResults([6], bytes(1), [b"f"])  # the profiling columns went with their message


def test_measured_results_send_their_profiling_columns_only_when_a_task_was_profiled() -> None:
    batch = MeasuredResultColumns()
    assert batch.take() is None
    batch.add(1, OK, b"a", 100, 0, 0, 0)
    batch.add(2, OK, b"b", 200, 0, 0, 0)
    assert batch.durations == [100, 200]  # kept all the same (the processor's run times: the agent averages them)
    assert batch.take() == TaskResults([1, 2], bytes(2), [b"a", b"b"])
    batch.add(3, OK, b"c", 300, 0, 0, 0)
    batch.add(4, ERROR, b"e", 400, 512, 350, 1)
    batch.validate()
    assert batch.take() == TaskResults([3, 4], bytes([OK, ERROR]), [b"c", b"e"], [300, 400], [0, 512], [0, 350])
    batch.add(5, OK, b"f", 500, 0, 0, 0)
    assert batch.take() == TaskResults([5], bytes(1), [b"f"])  # profiled was for that batch only
    batch.add(6, OK, b"g", 600, 0, 0, 1)
    batch.clear()
    assert batch.take() is None and not batch.profiled


def test_output_keeps_pieces_in_order_and_counts_their_characters() -> None:
    output = OutputColumns()
    assert output.take() is None
    output.add(1, OUTPUT_STDOUT, "hello\n")
    output.add_pieces(2, [(OUTPUT_STDERR, "warn\n"), (OUTPUT_ERROR, "Traceback\n")])
    assert output.chars == len("hello\nwarn\nTraceback\n")
    output.validate()
    expected = TaskOutput(
        [1, 2, 2], bytes([OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR]), ["hello\n", "warn\n", "Traceback\n"]
    )
    assert output.take() == expected
    assert output.chars == 0 and output.take() is None
    output.add(3, OUTPUT_STDOUT, "x")
    output.clear()
    assert output.take() is None and output.chars == 0


def test_columns_that_disagree_are_an_invariant_error() -> None:
    outbox = ResultColumns()
    outbox.add(1, OK, b"a")
    outbox.payloads.append(b"stray")
    with pytest.raises(InvariantError, match="differ in length"):
        outbox.validate()
    outbox = ResultColumns()
    outbox.add(1, OK, b"a", 1, 0, 0)
    outbox.cpu = None
    with pytest.raises(InvariantError, match="not all three"):
        outbox.validate()
    batch = MeasuredResultColumns()
    batch.add(1, OK, b"a", 1, 0, 0, 0)
    batch.peaks.pop()
    with pytest.raises(InvariantError, match="differ in length"):
        batch.validate()
    output = OutputColumns()
    output.add(1, OUTPUT_STDOUT, "abc")
    output.chars = 2
    with pytest.raises(InvariantError, match="counts 2 characters"):
        output.validate()
