"""The scheduler's settings, declared once: scaler_scheduler's flags, the scheduler keywords of SchedulerClusterCombo
and Scheduler, and the keys a mapping (a configuration file) may give are all made from SchedulerSettings.

The settings the scheduler core reads keep their defaults in its SchedulerConfig (the core is built without settings
in tests and simulations): they are taken from there, and core_config() gives the core its part.

Runs on Python 3.9: the scheduler (PyPy) imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from scaler.core.scheduler.config import SchedulerConfig
from scaler.io.cpus import check_cpu
from scaler.io.sizes import parse_size
from scaler.scheduler.journaling import DEFAULT_SYNC, SYNC_CHOICES
from scaler.scheduler.monitors import TASK_DATA_CHOICES
from scaler.settings.common import KEYS_HELP, KEYS_RULE, OPTIONAL_ADDRESS_RULE, ProcessSettings
from scaler.settings.model import Rule, choice, flag, labelled, number, setting, whole

_CORE = SchedulerConfig()
SIZE_RULE = Rule("a number of bytes, like 1048576, 512M or 8G", (int, str), None, labelled(parse_size))


def _path(value: Any, label: str) -> str:
    path = os.fspath(value)
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"{label or 'a path'} must be the path of a file, not {value!r}")
    return path


PATH_RULE = Rule("the path of a file", (str, os.PathLike), None, _path, optional=True)
CPU_RULE = Rule("auto, none or a CPU number", (str, int), None, labelled(check_cpu), optional=True)  # None: "none"


@dataclass(frozen=True)
class SchedulerSettings(ProcessSettings):
    """Everything a scheduler is started with."""

    address: str | None = setting(
        None,
        positional=True,
        help="address to listen on, e.g. tcp://127.0.0.1:8516 (this machine only); to listen on the network "
        "(e.g. tcp://0.0.0.0:8516), use --keys",
        rule=OPTIONAL_ADDRESS_RULE,
    )
    keys: str | bool | None = setting(None, flags=("--keys", "-k"), metavar="DIR", help=KEYS_HELP, rule=KEYS_RULE)
    monitor_address: str | None = setting(
        None,
        flags=("--monitor-address", "-ma"),
        help="where monitors (scaler_top, scaler_ui) connect (default: ipc://DIR/<host>_<port>_monitor in a folder "
        "private to this user: $XDG_RUNTIME_DIR/scaler or /tmp/scaler-<uid>; scaler_top also finds it given "
        "ipc:///tmp/<host>_<port>_monitor)",
        rule=OPTIONAL_ADDRESS_RULE,
    )
    monitor_task_data: str = setting(
        "auto",
        help="whether statuses on the monitor address carry task data (the exception texts of failures and what tasks "
        "print): auto sends it to ipc:// monitors (only this user can connect) and to tcp:// monitors with keys "
        "(only monitor keys can), not to a tcp:// monitor without keys; on: always; off: never",
        rule=choice(TASK_DATA_CHOICES),
    )
    protected: bool = setting(
        _CORE.protected,
        help="protected mode, on by default: refuse client.shutdown(); --no-protected lets clients stop the cluster",
        rule=flag(),
    )
    worker_timeout_seconds: float = setting(
        _CORE.worker_timeout_seconds,
        flags=("--worker-timeout-seconds", "-wt"),
        help="a worker silent this long is declared dead and its tasks run elsewhere",
        rule=number(above=0),
    )
    client_timeout_seconds: float = setting(
        _CORE.client_timeout_seconds,
        flags=("--client-timeout-seconds", "-ct"),
        help="a client silent this long is disconnected and its tasks cancelled",
        rule=number(above=0),
    )
    max_task_retries: int = setting(
        _CORE.max_task_retries,
        help="times a task is re-run after its worker died, before it fails",
        rule=whole(0),
    )
    max_payload_bytes: int = setting(
        _CORE.max_payload_bytes,
        metavar="SIZE",
        help="the most bytes one function, argument, object or result may have once serialized (K, M, G suffixes); "
        "bigger ones are refused with a clear error",
        rule=SIZE_RULE,
    )
    keyed_results_bytes: int = setting(
        _CORE.keyed_results_bytes,
        metavar="SIZE",
        help="the results of idempotent-keyed tasks (client.options(idempotency_key=...)) kept by key weigh at most "
        "this much (K, M, G suffixes); past it the oldest of the credentials that keep the most are let go, and a "
        "task sent again with such a key runs again",
        rule=SIZE_RULE,
    )
    capability_grace_seconds: float = setting(
        _CORE.capability_grace_seconds,
        help="while workers are connected but none offers every capability a queued task requires, the task waits "
        "this long for one to join, then fails (missing capabilities); 0: at once",
        rule=number(at_least=0),
    )
    balance_interval_seconds: float = setting(
        _CORE.balance_interval_seconds,
        help="the least time between two balancing passes (moving queued tasks from busy workers to idle ones)",
        rule=number(at_least=0),
    )
    max_connections: int | None = setting(
        None,
        help="open connections (clients, workers, monitors, and connections that have not said anything yet) at "
        "most; default: what the file descriptor limit allows once the scheduler raised it to its hard limit, less "
        "an eighth (at least 64) kept for other uses, and 65,536 at most",
        rule=whole(1, optional=True),
    )
    max_silent_connections: int | None = setting(
        None,
        help="connections that have not sent a message yet (a handshake under way, or a peer that says nothing) at "
        "most; past it the oldest of them are ended. By default a quarter of --max-connections, 256 at most",
        rule=whole(1, optional=True),
    )
    cpu: str | int | None = setting(
        "auto",
        help="the CPU the scheduler keeps to, with its ZeroMQ I/O thread: auto (the last CPU it may use that no "
        "other scheduler of this user's on this machine holds; none free: anywhere), none (anywhere), or a CPU "
        "number; on one CPU the hand-over of each message between the two threads is cheaper",
        rule=CPU_RULE,
    )

    journal: str | None = setting(
        None,
        metavar="PATH",
        help="keep a journal in this file (created if missing): started again with the same command after a crash or "
        "a kill -9, the scheduler resumes its clients' sessions from it (docs/adr/0023). Only this scheduler (its "
        "address) may use the file (default: none, no journal)",
        rule=PATH_RULE,
    )
    journal_sync: str = setting(
        DEFAULT_SYNC,
        help="with --journal, when the journal reaches the disk: interval (a background fdatasync at most every 50 ms "
        "while something was written: a kill -9 loses nothing, an OS crash at most the last 50 ms), always (before "
        "each reply goes out: slower), none (left to the OS)",
        rule=choice(SYNC_CHOICES),
    )

    def core_config(self) -> SchedulerConfig:
        """The scheduler core's part of these settings (its other settings at their defaults)."""
        return SchedulerConfig(
            protected=self.protected,
            worker_timeout_seconds=self.worker_timeout_seconds,
            client_timeout_seconds=self.client_timeout_seconds,
            max_task_retries=self.max_task_retries,
            max_payload_bytes=self.max_payload_bytes,
            keyed_results_bytes=self.keyed_results_bytes,
            capability_grace_seconds=self.capability_grace_seconds,
            balance_interval_seconds=self.balance_interval_seconds,
        )
