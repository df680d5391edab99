"""Text rendering of a scheduler Status for scaler_top: sections side by side, the functions, the worker managers and
why tasks wait, then the worker table;
the waiting screen before the first status, and the banner over a status that stopped coming.

Pure: a Status, the time and the status's age in, lines out; curses and clocks live in scaler.monitor.top.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scaler.core.capabilities import PYTHON_PAYLOAD
from scaler.protocol.messages import ClientStatus, FunctionStatus, ManagerStatus, Status, WaitingTasks, WorkerStatus


@dataclass(frozen=True)
class Column:
    title: str
    key: str  # the sort shortcut
    value: Callable[[WorkerStatus], float | str]
    show: Callable[[WorkerStatus], str]
    width: int


def fmt_bytes(value: int) -> str:
    size = float(value)
    for unit in ("b", "k", "m", "g"):
        if size < 1024 or unit == "g":
            return f"{size:.1f}{unit}" if unit != "b" else f"{int(size)}b"
        size /= 1024
    return f"{size:.1f}t"


def fmt_lag(us: int) -> str:
    return f"{us / 1000:.1f}ms" if us < 1_000_000 else f"{us / 1e6:.1f}s"


def fmt_duration(us: float) -> str:
    """A run time: 0.4ms, 2.5s, 12.0m, 1.5h."""
    if us < 60_000_000:
        return fmt_lag(round(us))
    return f"{us / 60e6:.1f}m" if us < 3600e6 else f"{us / 3600e6:.1f}h"


def fmt_age(ms: int) -> str:
    """How long ago, coarsely: 7s, 12m, 3h."""
    seconds = ms / 1000
    if seconds < 100:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 6000 else f"{seconds / 3600:.0f}h"


def printable(text: str) -> str:
    """`text` safe to write to a terminal: names come from peers, and a control character would move the cursor."""
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut in the middle: both a name's start and its own last part stay."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "\u2026"[:width]
    head = (width - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (width - 1 - head) :]


def _itl(w: WorkerStatus) -> str:
    return f"{int(w.processors > 0)}{int(w.running > 0)}{int(w.blocked_processors > 0)}"


STALE_HEARTBEAT_MS = 5000  # a worker row older than this says how old: more than 2 heartbeats at the default 2 s


def _heartbeat_age(w: WorkerStatus) -> str:
    return fmt_age(w.heartbeat_age_ms) if w.heartbeat_age_ms > STALE_HEARTBEAT_MS else "-"


CAPABILITIES_WIDTH = 30  # longer lists of capabilities are cut in the middle


def _capabilities(w: WorkerStatus) -> str:
    """What the worker offers beyond the Python payload convention every Python worker offers ("-": nothing)."""
    extra = [c for c in w.capabilities if c != PYTHON_PAYLOAD]
    return cut(printable(",".join(extra)), CAPABILITIES_WIDTH) if extra else "-"


COLUMNS = [  # width 0: as wide as its widest cell
    Column("worker", "n", lambda w: w.name, lambda w: printable(w.name), 0),
    Column("agt_cpu", "C", lambda w: w.agent_cpu_percent, lambda w: f"{w.agent_cpu_percent:.1f}%", 7),
    Column("agt_rss", "M", lambda w: w.agent_rss_bytes, lambda w: fmt_bytes(w.agent_rss_bytes), 7),
    Column("cpu", "c", lambda w: w.cpu_percent, lambda w: f"{w.cpu_percent:.1f}%", 6),
    Column("rss", "m", lambda w: w.rss_bytes, lambda w: fmt_bytes(w.rss_bytes), 7),
    Column("free", "f", lambda w: w.free, lambda w: str(w.free), 5),
    Column("sent", "w", lambda w: w.sent, lambda w: str(w.sent), 5),
    Column("prefetched", "d", lambda w: w.queued, lambda w: str(w.queued), 10),
    Column("waiting", "W", lambda w: w.waiting, lambda w: str(w.waiting), 7),
    Column("lag", "l", lambda w: w.lag_us, lambda w: fmt_lag(w.lag_us), 7),
    # lost repeatedly: no new tasks for this much longer
    Column(
        "held", "h", lambda w: w.held_back_ms, lambda w: f"{w.held_back_ms / 1000:.0f}s" if w.held_back_ms else "-", 5
    ),
    # the row's prefetched, running, cpu, rss and sent are as of the worker's last heartbeat: its age once that is long
    Column("hb_age", "a", lambda w: w.heartbeat_age_ms, _heartbeat_age, 6),
    Column("ITL", "", lambda w: _itl(w), _itl, 3),
    Column("caps", "", _capabilities, _capabilities, 0),
]
SHORTCUTS = {c.key: c for c in COLUMNS if c.key}
STALE_AFTER_SECONDS = 3.0  # the scheduler publishes once a second: three missed in a row look like a stop
FUNCTION_NAME_WIDTH = 40  # longer function names are cut in the middle


def function_rows(height: int) -> int:
    """How many functions a terminal `height` lines high shows: about 20 lines go to the sections above and the worker
    table's head, half of the rest to the functions (2 at least), up to a quarter of the height."""
    return min(max(2, height // 4), max(2, (height - 20) // 2))


def waiting(address: str, waited_seconds: float, width: int = 200) -> list[str]:
    """The screen before the first status: where scaler_top listens, and for how long it has."""
    return [f"waiting for the scheduler's status at {address}… ({waited_seconds:.0f}s)"[:width]]


def is_stale(age_seconds: float) -> bool:
    return age_seconds > STALE_AFTER_SECONDS


def stale_banner(now: datetime, age_seconds: float) -> str:
    last_at = (now - timedelta(seconds=age_seconds)).strftime("%H:%M:%S")
    return f"no status for {age_seconds:.0f}s: the scheduler may have stopped (last at {last_at})"


def screen(
    status: Status,
    now: datetime,
    age_seconds: float,
    sort_key: str = "n",
    width: int = 200,
    max_functions: int | None = None,
) -> list[str]:
    """The screen for the latest status, received `age_seconds` before `now`: under a banner if that is long ago."""
    lines = render(status, sort_key, width, max_functions)
    if is_stale(age_seconds):
        lines.insert(0, stale_banner(now, age_seconds)[:width])
    return lines


def _section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width_name = max([len(title) - 8, *(len(n) for n, _ in rows)], default=0)
    width_value = max([len(v) for _, v in rows], default=0)
    lines = [title.rjust(width_name + width_value + 1)]
    lines += [f"{name.rjust(width_name)} {value.rjust(width_value)}" for name, value in rows]
    return lines


def render(status: Status, sort_key: str = "n", width: int = 200, max_functions: int | None = None) -> list[str]:
    """The screen for one status: summary sections, the functions (the first `max_functions` of them, all if None), a
    rule, shortcuts, the worker table and the clients; no line longer than `width`."""
    counts = status.tasks_by_state
    own = [("cpu", f"{status.cpu_percent:.1f}%"), ("rss", fmt_bytes(status.rss_bytes))]
    if status.started_us:  # a restart shows as an uptime that starts again (and what its journal brought back)
        own.append(("up", fmt_duration(max(0, status.time_us - status.started_us))))
    if status.dropped_messages:  # bad messages and refused keys: shown only when there were some
        own.append(("dropped", f"{status.dropped_messages:,}"))
    if status.refused_peers:
        own.append(("refused", f"{status.refused_peers:,}"))
    if status.handler_errors:  # bugs the scheduler survived: its log has their tracebacks
        own.append(("errors", f"{status.handler_errors:,}"))
    sections = [
        _section("scheduler", own),
        _section("task_manager", [(k, f"{v:,}") for k, v in counts.items()]),
        _section("scheduler_sent", [(k, f"{v:,}") for k, v in sorted(status.sent.items(), key=lambda i: -i[1])]),
        _section(
            "scheduler_received", [(k, f"{v:,}") for k, v in sorted(status.received.items(), key=lambda i: -i[1])]
        ),
    ]
    height = max(len(s) for s in sections)
    widths = [max(len(line) for line in s) for s in sections]
    lines = []
    for row in range(height):
        cells = [(s[row] if row < len(s) else "").rjust(w) for s, w in zip(sections, widths)]
        lines.append(" | ".join(cells).rstrip())
    if status.recovered:
        started = datetime.fromtimestamp(status.started_us / 1e6).strftime("%H:%M:%S")
        lines.append(cut(f"started {started} from its journal: {printable(status.recovered)} came back", width))
    if status.functions:
        lines.append("")
        lines += function_table(status.functions, width, max_functions)
    scaling = scaling_lines(status)
    if scaling:
        lines.append("")
        lines += scaling
    rule_width = min(width, max(len(line) for line in lines))
    lines.append("-" * rule_width)
    shortcuts = " ".join(f"{c.title}[{c.key}]" for c in COLUMNS if c.key)
    lines.append(f"Shortcuts: {shortcuts}")
    lines.append("")
    workers = _worker_table(status, sort_key)
    clients = [client_line(c) for c in status.clients]
    if max(map(len, workers)) + 3 + max(map(len, clients), default=0) <= width:
        lines.append(f"Total {len(status.workers)} worker(s)")
        lines += _beside(workers, "client_manager", clients)
    else:  # too narrow (80 columns): the clients above the workers, which may be cut on the right
        lines.append(f"Total {len(status.clients)} client(s)")
        lines += clients[:MAX_CLIENT_LINES]
        if len(clients) > MAX_CLIENT_LINES:
            lines.append(f"\u2026 and {len(clients) - MAX_CLIENT_LINES} more")
        lines.append(f"Total {len(status.workers)} worker(s)")
        lines += workers
    return [line[:width] for line in lines]


MAX_WAITING_LINES = 4  # groups of waiting tasks shown (the status carries at most 16)


def scaling_lines(status: Status) -> list[str]:
    """The worker managers, with their units by state, and why queued tasks wait (scaler.capnp's ManagerStatus and
    WaitingTasks): nothing if there is neither."""
    lines = []
    if status.managers:
        events = f"units started {status.units_started:,}, stopped {status.units_stopped:,}"
        lines.append(f"worker managers ({events}, failed to start {status.units_failed:,})")
        lines += [manager_line(m) for m in status.managers]
    for group in status.waiting[:MAX_WAITING_LINES]:
        lines.append(f"waiting: {waiting_line(group)}")
    if len(status.waiting) > MAX_WAITING_LINES:
        lines.append(f"\u2026 and {len(status.waiting) - MAX_WAITING_LINES} more groups of waiting tasks")
    return lines


def manager_line(m: ManagerStatus) -> str:
    """One worker manager: '  slurm-gpu tier 0 [gpu] units 1 up, 0 draining, 2 pending (oldest 12s) of 0..8'."""
    offers = [c for c in m.capabilities if not c.startswith("payload=")]
    caps = f" [{', '.join(printable(c) for c in offers)}]" if offers else ""
    pending = f", {m.pending} pending (oldest {fmt_age(m.oldest_pending_ms)})" if m.pending else ""
    line = f"  {printable(m.name)} tier {m.tier}{caps}: units {m.connected} up, {m.draining} draining{pending}"
    line += f" of {m.min_units}..{m.max_units}"
    if m.failures:
        retry = f", asked again in {fmt_age(m.retry_in_ms)}" if m.retry_in_ms else ""
        line += f"; {m.failures} failed to start ({printable(m.last_failure)}{retry})"
    return line


def waiting_line(group: WaitingTasks) -> str:
    """'12 tasks requiring gpu: no connected worker offers gpu; ...'"""
    needs = [c for c in group.capabilities if not c.startswith("payload=")]
    requiring = f" requiring {', '.join(printable(c) for c in needs)}" if needs else ""
    return f"{group.tasks:,} tasks{requiring}: {printable(group.reason)}"


MAX_CLIENT_LINES = 5  # clients listed above the workers when they do not fit beside them
NESTED_PREFIX = "nested-"  # the name of a client made inside a task (scaler.client.client: nested-<pid>-<n>)


def client_line(c: ClientStatus) -> str:
    """A client's unfinished tasks in the words of docs/monitoring.md: queued (waiting or queued at the scheduler) and
    assigned (at workers), then its objects and completed tasks."""
    return f"{printable(c.name)} queued={c.queued:,} assigned={c.assigned:,} objects={c.objects} done={c.completed:,}"


def is_nested(name: str) -> bool:
    """Whether a client of this name was made inside a task (a nested client)."""
    return name.startswith(NESTED_PREFIX)


def _beside(table: list[str], title: str, side: list[str]) -> list[str]:
    """`side` (under `title`) to the right of `table`, row by row; its rows past the table's under blank cells."""
    pad = len(table[0])
    lines = [f"{table[0]} | {title}"]
    for index in range(1, max(len(table), len(side) + 1)):
        left = table[index] if index < len(table) else " " * pad
        lines.append(f"{left.ljust(pad)} | {side[index - 1] if index - 1 < len(side) else ''}")
    return lines


def _worker_table(status: Status, sort_key: str) -> list[str]:
    column = SHORTCUTS.get(sort_key, COLUMNS[0])
    workers = sorted(status.workers, key=column.value, reverse=column.key != "n")
    widths = [c.width or max([0, *(len(c.show(w)) for w in workers)]) for c in COLUMNS]
    headers = []
    for c, width in zip(COLUMNS, widths):
        title = f"[{c.title}]" if c is column else c.title
        headers.append(title.rjust(max(width, len(title))))
    table = [" ".join(headers)]
    for w in workers:
        table.append(" ".join(c.show(w).rjust(len(h)) for c, h in zip(COLUMNS, headers)))
    return table


FUNCTION_TITLES = ("submitted", "assigned", "success", "error", "failed", "canceled", "mean")


def function_cells(f: FunctionStatus) -> tuple[str, ...]:
    """A function's row in the words of docs/monitoring.md: assigned is at workers (prefetched or running); error is
    the task raised, failed is its worker could not finish it (crashed, timed out, over memory); mean is the mean run
    time of its tasks that ended with a result (success or error), "-" if no run time came (none ended so, or their
    workers sent no run times)."""
    timed = timed_tasks(f)
    mean = fmt_duration(f.duration_us / timed) if timed else "-"
    counts = (f.submitted, f.running, f.success, f.error, f.failed, f.canceled)
    return (*(f"{n:,}" for n in counts), mean)


def timed_tasks(f: FunctionStatus) -> int:
    """How many tasks f.duration_us sums: those that came with a run time (profiled); a scheduler that does not say
    (timedTasks 0 with a run time) summed its tasks that ended with a result."""
    if f.timed_tasks or not f.duration_us:
        return f.timed_tasks
    return f.success + f.error


def function_order(f: FunctionStatus) -> tuple[int, int, str]:
    """Functions with tasks running first, the most running first; then the most submitted; then by name."""
    return (-f.running, -f.submitted, f.name)


def function_table(functions: list[FunctionStatus], width: int, max_functions: int | None = None) -> list[str]:
    """One row per function (see function_cells, function_order): the first `max_functions` and how many more, names
    cut to fit `width` (and FUNCTION_NAME_WIDTH)."""
    ordered = sorted(functions, key=function_order)
    shown = ordered if max_functions is None else ordered[:max_functions]
    rows = [function_cells(f) for f in shown]
    widths = [max([len(title), *(len(row[i]) for row in rows)]) for i, title in enumerate(FUNCTION_TITLES)]
    numbers = sum(widths) + len(widths)
    longest = max([len("function"), *(len(f.name) for f in shown)])
    name_width = max(len("function"), min(longest, FUNCTION_NAME_WIDTH, width - numbers))
    table = [" ".join(["function".ljust(name_width), *(t.rjust(w) for t, w in zip(FUNCTION_TITLES, widths))])]
    for f, row in zip(shown, rows):
        name = cut(printable(f.name), name_width).ljust(name_width)
        table.append(" ".join([name, *(cell.rjust(w) for cell, w in zip(row, widths))]))
    if len(ordered) > len(shown):
        more = len(ordered) - len(shown)
        table.append(f"\u2026 and {more} more function{'s' if more > 1 else ''}")
    return table
