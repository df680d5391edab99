"""ClientStatus.assigned (issue 25 item 4): both codecs carry it, and a status from a scheduler that did not send it
(ClientStatus without the field, as encoded before it existed) decodes with 0."""

from __future__ import annotations

from types import ModuleType

import pytest

from scaler.protocol import codec, fieldnames
from scaler.protocol import messages as m
from scaler.protocol.wire import LAYOUT
from tests.protocol import capnp_codec

U32_MAX = 2**32 - 1
OLD_CLIENT_STATUS = (2, 1, {"name": ("text", 0), "tasks": ("u32", 0), "objects": ("u32", 1), "completed": ("u64", 1)})


def status(*clients: m.ClientStatus) -> m.Status:
    return m.Status(scheduler_name="s", clients=list(clients))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("encoder", [capnp_codec, codec])
@pytest.mark.parametrize("decoder", [capnp_codec, codec])
def test_assigned_travels_in_both_codecs(encoder: ModuleType, decoder: ModuleType) -> None:
    sent = status(
        m.ClientStatus("c", tasks=7, objects=1, completed=3, assigned=5), m.ClientStatus("d", U32_MAX, 0, 0, U32_MAX)
    )
    got = decoder.decode(encoder.encode(sent))
    assert isinstance(got, m.Status)
    assert [(c.name, c.tasks, c.assigned, c.queued) for c in got.clients] == [
        ("c", 7, 5, 2),
        ("d", U32_MAX, U32_MAX, 0),
    ]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("decoder", [capnp_codec, codec])
def test_a_status_without_assigned_decodes_with_0(decoder: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LAYOUT, "ClientStatus", OLD_CLIENT_STATUS)  # the layout before the field was added
    monkeypatch.setattr(
        fieldnames, "CLIENT_STATUS", {k: v for k, v in fieldnames.CLIENT_STATUS.items() if k != "assigned"}
    )
    frames = codec.encode(status(m.ClientStatus("c", tasks=4, objects=2, completed=9, assigned=3)))
    monkeypatch.undo()
    assert len(frames[0]) < len(codec.encode(status(m.ClientStatus("c", 4, 2, 9, 3)))[0]), "not the old layout"
    got = decoder.decode(frames)
    assert isinstance(got, m.Status)
    [c] = got.clients
    assert (c.name, c.tasks, c.objects, c.completed, c.assigned, c.queued) == ("c", 4, 2, 9, 0, 4)
