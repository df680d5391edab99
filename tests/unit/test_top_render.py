"""scaler_top's rendering: sections, sort order and the worker table, from a Status alone."""

from __future__ import annotations

import re
from datetime import datetime

from scaler.monitor.render import fmt_bytes, fmt_lag, is_stale, render, screen, waiting
from scaler.protocol.messages import ClientStatus, Status, WorkerStatus


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
        clients=[ClientStatus("c-1", tasks=5, objects=1, completed=12)],
    )


def test_sections_show_counts_and_resources() -> None:
    text = "\n".join(render(_status()))
    assert "scheduler" in text and "task_manager" in text and "scheduler_sent" in text
    assert "12.5%" in text and "130.0m" in text
    assert "53,704" in text and "heartbeat" in text
    assert "Total 2 worker(s)" in text
    shortcuts = "worker[n] agt_cpu[C] agt_rss[M] cpu[c] rss[m] free[f] sent[w] queued[d] waiting[W] lag[l] held[h]"
    assert "Shortcuts: " + shortcuts in text
    assert "c-1 tasks=5 objects=1 done=12" in text


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
