"""scaler_top's rendering: sections, sort order and the worker table, from a Status alone."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from scaler.monitor.render import (
    FUNCTION_NAME_WIDTH,
    cut,
    fmt_age,
    fmt_bytes,
    fmt_duration,
    fmt_lag,
    function_rows,
    is_stale,
    printable,
    render,
    screen,
    waiting,
)
from scaler.protocol.messages import ClientStatus, FunctionStatus, ManagerStatus, Status, WaitingTasks, WorkerStatus

pytestmark = pytest.mark.timeout(60)


def _status() -> Status:
    return Status(
        scheduler_name="s",
        cpu_percent=12.5,
        rss_bytes=130 * 2**20,
        tasks_by_state={"queued": 3, "assigned": 2, "success": 53704},
        sent={"dispatchTasks": 10, "taskResults": 7},
        received={"submitTasks": 4, "heartbeat": 99},
        workers=[
            WorkerStatus("w-a", agent_cpu_percent=0.5, rss_bytes=100, free=998, sent=2, lag_us=700, processors=1),
            WorkerStatus("w-b", agent_cpu_percent=3.0, rss_bytes=300, free=1000, sent=0, lag_us=2500, running=1),
        ],
        clients=[ClientStatus("c-1", tasks=5, objects=1, completed=12, assigned=2)],
    )


def test_sections_show_counts_and_resources() -> None:
    text = "\n".join(render(_status()))
    assert "scheduler" in text and "task_manager" in text and "scheduler_sent" in text
    assert "12.5%" in text and "130.0m" in text
    assert "53,704" in text and "heartbeat" in text
    assert "Total 2 worker(s)" in text
    shortcuts = (
        "worker[n] agt_cpu[C] agt_rss[M] cpu[c] rss[m] free[f] sent[w] prefetched[d] waiting[W] lag[l] held[h]"
        " hb_age[a]"
    )
    assert "Shortcuts: " + shortcuts in text
    assert "c-1 queued=3 assigned=2 objects=1 done=12" in text


def test_sort_by_name_then_by_agent_cpu_descending() -> None:
    by_name = [line for line in render(_status(), "n") if line.lstrip().startswith("w-")]
    assert [line.split()[0] for line in by_name] == ["w-a", "w-b"]
    by_cpu = [line for line in render(_status(), "C") if line.lstrip().startswith("w-")]
    assert [line.split()[0] for line in by_cpu] == ["w-b", "w-a"]
    header = next(line for line in render(_status(), "C") if "ITL" in line)
    assert "[agt_cpu]" in header


def test_itl_bits_and_formats() -> None:
    rows = {line.split()[0]: line for line in render(_status()) if line.lstrip().startswith("w-")}
    assert " 100 " in rows["w-a"] + " "  # processor up, no task, no lock
    assert " 010 " in rows["w-b"] + " "
    assert fmt_bytes(1536) == "1.5k" and fmt_bytes(12) == "12b"
    assert fmt_lag(700) == "0.7ms" and fmt_lag(2_500_000) == "2.5s"


def test_width_truncates_every_line() -> None:
    assert all(len(line) <= 40 for line in render(_status(), width=40))


def test_workers_sort_by_their_tasks_waiting_on_nested_tasks() -> None:
    status = _status()
    status.workers[1].waiting = 40
    lines = render(status, "W")
    header = next(line for line in lines if "ITL" in line)
    assert "[waiting]" in header
    rows = [line for line in lines if line.lstrip().startswith("w-")]
    assert [line.split()[0] for line in rows] == ["w-b", "w-a"] and " 40 " in rows[0]


def test_dropped_messages_and_refused_peers_show_only_when_there_were_some() -> None:
    quiet = "\n".join(render(_status()))
    assert "dropped" not in quiet and "refused" not in quiet
    status = _status()
    status.dropped_messages, status.refused_peers = 1234, 7
    lines = render(status)
    assert any(re.search(r"dropped +1,234", line) for line in lines)
    assert any(re.search(r"refused +7\b", line) for line in lines)


def test_a_held_back_worker_shows_for_how_long_and_sorts_first_by_it() -> None:
    status = _status()
    status.workers[0].held_back_ms = 12_400
    lines = render(status, "h")
    header = next(line for line in lines if "ITL" in line)
    assert "[held]" in header
    rows = [line for line in lines if line.lstrip().startswith("w-")]
    assert [row.split()[0] for row in rows] == ["w-a", "w-b"]
    assert " 12s " in rows[0] and " - " in rows[1]


NOW = datetime(2024, 5, 1, 12, 0, 30)


def test_before_the_first_status_the_screen_says_where_it_waits_and_for_how_long() -> None:
    assert waiting("ipc:///tmp/m", 0.2) == ["waiting for the scheduler's status at ipc:///tmp/m\u2026 (0s)"]
    assert waiting("ipc:///tmp/m", 7.6) == ["waiting for the scheduler's status at ipc:///tmp/m\u2026 (8s)"]
    assert all(len(line) <= 20 for line in waiting("ipc:///tmp/a_long_monitor_address", 3, width=20))


def test_a_fresh_status_shows_no_banner() -> None:
    assert screen(_status(), NOW, 0.9) == render(_status())
    assert screen(_status(), NOW, 3.0) == render(_status())  # one late publication is not a stop
    assert not is_stale(3.0) and is_stale(3.1)


def test_a_status_older_than_3s_keeps_the_last_screen_under_a_banner() -> None:
    lines = screen(_status(), NOW, 12.4)
    assert lines[0] == "no status for 12s: the scheduler may have stopped (last at 12:00:17)"
    assert lines[1:] == render(_status())
    assert all(len(line) <= 30 for line in screen(_status(), NOW, 12.4, width=30))


def test_the_banner_goes_when_statuses_resume() -> None:
    assert screen(_status(), NOW, 5.0)[0].startswith("no status for 5s")
    assert not any("no status" in line for line in screen(_status(), NOW, 0.1))


def _functions() -> list[FunctionStatus]:
    return [
        FunctionStatus("abs", submitted=300, success=297, error=1, canceled=1, failed=1, duration_us=298 * 120),
        FunctionStatus("spin", submitted=2, running=1),
        FunctionStatus("idle", submitted=5, canceled=5),
        FunctionStatus("fetch", submitted=9, running=4, success=5, duration_us=5 * 2_500_000),
    ]


def _function_rows(lines: list[str]) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if line.startswith("function "))
    rows = {}
    for line in lines[start + 1 :]:
        if not line or line.startswith("-"):
            break
        rows[line.split()[0]] = line.split()[1:]
    return rows


def test_the_functions_show_submitted_assigned_success_error_failed_canceled_and_mean_run_time() -> None:
    status = _status()
    status.functions = _functions()
    lines = render(status)
    header = next(line for line in lines if line.startswith("function "))
    assert header.split() == ["function", "submitted", "assigned", "success", "error", "failed", "canceled", "mean"]
    rows = _function_rows(lines)
    assert rows["abs"] == ["300", "0", "297", "1", "1", "1", "0.1ms"]  # the words of docs/monitoring.md
    assert rows["fetch"] == ["9", "4", "5", "0", "0", "0", "2.5s"]
    assert rows["idle"] == ["5", "0", "0", "0", "0", "5", "-"]  # no task ended with a result: no mean
    status.functions = [FunctionStatus("untimed", submitted=3, success=3)]
    assert _function_rows(render(status))["untimed"] == ["3", "0", "3", "0", "0", "0", "-"]  # no run time: no mean
    status.functions = [FunctionStatus("sampled", 301, 0, 301, duration_us=100_000, timed_tasks=1)]
    assert _function_rows(render(status))["sampled"][-1] == "100.0ms"  # the one profiled task's, not 0.3ms
    assert lines.index(header) < lines.index(next(line for line in lines if line.startswith("Shortcuts:")))


def test_functions_with_tasks_running_come_first_then_the_most_submitted() -> None:
    status = _status()
    status.functions = [*_functions(), FunctionStatus("also_idle", submitted=5)]
    assert list(_function_rows(render(status))) == ["fetch", "spin", "abs", "also_idle", "idle"]


def test_no_functions_no_function_table() -> None:
    assert not any(line.startswith("function") for line in render(_status()))


def test_the_screen_shows_the_first_functions_and_how_many_more() -> None:
    status = _status()
    status.functions = _functions()
    lines = screen(status, NOW, 0.5, max_functions=2)
    assert list(_function_rows(lines)) == ["fetch", "spin", "\u2026"]
    assert "\u2026 and 2 more functions" in lines
    assert "\u2026 and 1 more function" in render(status, max_functions=3)
    assert len(_function_rows(render(status))) == 4  # --once: all of them
    assert [function_rows(h) for h in (8, 24, 30, 40, 60)] == [2, 2, 5, 10, 15]  # room is left for the workers


def test_long_function_names_are_cut_in_the_middle_and_rows_fit_the_width() -> None:
    status = _status()
    long = "module.Outer.<locals>." + "x" * 60 + ".compute"
    status.functions = [FunctionStatus(long, submitted=1_234_567, success=3, duration_us=3 * 75_000_000)]
    wide = _function_rows(render(status))
    (name,) = wide
    assert len(name) == FUNCTION_NAME_WIDTH and name.startswith("module.Outer") and name.endswith(".compute")
    assert wide[name] == ["1,234,567", "0", "3", "0", "0", "0", "1.2m"]
    narrow = render(status, width=70)
    row = next(line for line in narrow if "\u2026" in line and "1,234,567" in line)
    assert len(row) <= 70 and row.endswith("1.2m")


def test_at_80_columns_the_clients_are_listed_above_the_workers_whole() -> None:
    status = _status()
    status.clients = [ClientStatus(f"client-4242-{i}", 5 * i, i, 1_000 * i, assigned=i) for i in range(7)]
    lines = screen(status, NOW, 0.5, width=80, max_functions=function_rows(24))
    assert all(len(line) <= 80 for line in lines)
    assert "Total 7 client(s)" in lines and "client-4242-3 queued=12 assigned=3 objects=3 done=3,000" in lines
    assert "\u2026 and 2 more" in lines  # five listed
    assert lines.index("Total 7 client(s)") < lines.index("Total 2 worker(s)") < 24
    wide = render(status, width=250)  # room enough: beside the workers, as before
    assert any(line.endswith(" | client_manager") for line in wide) and "Total 7 client(s)" not in wide


def test_control_characters_in_peer_names_do_not_reach_the_terminal() -> None:
    status = _status()
    status.workers[0].name = "w-\x1b[2J"
    status.clients[0].name = "c\n1"
    status.functions = [FunctionStatus("f\r\x07", submitted=1)]
    text = "\n".join(render(status))
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "w-?[2J" in text and "c?1 queued=3" in text and "f??" in text
    assert printable("plain") == "plain" and printable("a\tb") == "a?b"


def test_a_worker_row_older_than_5s_says_how_old_and_sorts_first_by_it() -> None:
    status = _status()
    status.workers[0].heartbeat_age_ms = 5000  # at the limit: the row is recent enough
    status.workers[1].heartbeat_age_ms = 12_400
    lines = render(status, "a")
    header = next(line for line in lines if "ITL" in line)
    assert "[hb_age]" in header and header.index("held") < header.index("[hb_age]") < header.index("ITL")
    rows = [line for line in lines if line.lstrip().startswith("w-")]
    assert [row.split()[0] for row in rows] == ["w-b", "w-a"]
    assert " 12s 010 " in rows[0] and " - 100 " in rows[1]


def test_durations_ages_and_cut_names() -> None:
    assert fmt_duration(400) == "0.4ms" and fmt_duration(2_500_000) == "2.5s"
    assert fmt_duration(90_000_000) == "1.5m" and fmt_duration(5_400_000_000) == "1.5h"
    assert fmt_age(7_400) == "7s" and fmt_age(720_000) == "12m" and fmt_age(10_800_000) == "3h"
    assert cut("abcdefghij", 10) == "abcdefghij" and cut("abcdefghij", 5) == "ab\u2026ij"
    assert cut("abcdefghij", 4) == "a\u2026ij" and cut("abc", 1) == "\u2026" and cut("abc", 0) == ""


def test_capabilities_beyond_the_python_payload_show_in_the_last_column() -> None:
    status = _status()
    status.workers[0].capabilities = ["gpu", "licence=matlab", "payload=python"]
    status.workers[1].capabilities = ["payload=python"]
    header, *rows = [line for line in render(status, "n") if "ITL" in line or line.lstrip().startswith("w-")]
    assert header.split(" | ")[0].split()[-2:] == ["ITL", "caps"]
    cells = {row.split()[0]: row.split(" | ")[0].split()[-1] for row in rows}
    assert cells == {"w-a": "gpu,licence=matlab", "w-b": "-"}
    assert len({len(row.split(" | ")[0]) for row in [header, *rows]}) == 1  # the columns line up
    status.workers[1].capabilities = ["payload=python", *(f"feature-{i}" for i in range(20))]
    row = next(line for line in render(status, "n") if line.lstrip().startswith("w-b"))
    assert "\u2026" in row.split(" | ")[0].split()[-1] and len(row.split(" | ")[0].split()[-1]) == 30


def test_worker_managers_their_units_and_why_tasks_wait_show_between_the_functions_and_the_workers() -> None:
    status = _status()
    assert not any("worker managers" in line or line.startswith("waiting:") for line in render(status))
    status.managers = [
        ManagerStatus(
            "slurm-gpu", 1, ["payload=python", "gpu"], 0, 8, 1, 0, 2, 12_000, 2, "slurm-gpu-3: exit 1", 4_000
        ),
        ManagerStatus("local", capabilities=["payload=python"], max_units=4, connected=4),
    ]
    reasons = [f"every worker's queue is full (reason {i})" for i in range(6)]
    status.waiting = [WaitingTasks(["gpu", "payload=python"], 12, "no connected worker offers gpu")]
    status.waiting += [WaitingTasks(["payload=python"], 5, reason) for reason in reasons]
    status.units_started, status.units_stopped, status.units_failed = 7, 3, 2
    lines = render(status)
    at = lines.index("worker managers (units started 7, stopped 3, failed to start 2)")
    assert lines[at + 1] == (
        "  slurm-gpu tier 1 [gpu]: units 1 up, 0 draining, 2 pending (oldest 12s) of 0..8; 2 failed to start "
        "(slurm-gpu-3: exit 1, asked again in 4s)"
    )
    assert lines[at + 2] == "  local tier 0: units 4 up, 0 draining of 0..4"
    assert lines[at + 3] == "waiting: 12 tasks requiring gpu: no connected worker offers gpu"
    assert lines[at + 4] == f"waiting: 5 tasks: {reasons[0]}"
    assert lines[at + 7] == "\u2026 and 3 more groups of waiting tasks"  # 4 groups shown of 7
    assert lines.index(next(line for line in lines if line.startswith("Shortcuts"))) > at + 7
    assert all(len(line) <= 80 for line in render(status, width=80))


def test_the_uptime_shows_a_restart_and_what_the_journal_brought_back() -> None:
    status = _status()
    status.time_us = 1_764_000_000_000_000
    status.started_us = status.time_us - 95_000_000
    text = "\n".join(render(status))
    assert re.search(r"up +1\.6m", text) and "from its journal" not in text, text
    status.started_us = status.time_us - 4_000_000
    status.recovered = "1 client session, 45 tasks, 0 held results"
    lines = render(status)
    started = datetime.fromtimestamp(status.started_us / 1e6).strftime("%H:%M:%S")
    assert re.search(r"up +4\.0s", "\n".join(lines))
    assert f"started {started} from its journal: 1 client session, 45 tasks, 0 held results came back" in lines
