"""The settings of a cluster of workers on one machine, declared once: scaler_cluster's (and scaler_worker's) flags,
the worker keywords of Cluster and SchedulerClusterCombo, and the keys a mapping (a configuration file) may give are
all made from ClusterSettings.

The settings the worker's agent core reads keep their defaults in its AgentConfig: they are taken from there, and
agent_config() gives the agents their part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from scaler.core.capabilities import worker_capabilities
from scaler.core.worker.agent import AgentConfig
from scaler.io.addresses import hostname
from scaler.io.sizes import parse_size
from scaler.settings.common import KEYS_HELP, KEYS_RULE, OPTIONAL_ADDRESS_RULE, ProcessSettings
from scaler.settings.model import Rule, any_text, flag, number, setting, text, whole

_AGENT = AgentConfig()


def _memory_limit(value: Any, label: str) -> int:
    if value == 0 or (isinstance(value, str) and value.strip() == "0"):
        return 0
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}" if label else str(exc)) from None


def _capabilities(value: tuple[str, ...], label: str) -> tuple[str, ...]:
    return worker_capabilities(value, label or "capabilities")[1:]


def _cpu_count() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ClusterSettings(ProcessSettings):
    """Everything a cluster of workers (scaler_cluster, Cluster) is started with."""

    address: str | None = setting(
        None, positional=True, help="the scheduler's address, e.g. tcp://127.0.0.1:8516", rule=OPTIONAL_ADDRESS_RULE
    )
    n_workers: int = setting(
        factory=_cpu_count, flags=("--num-of-workers", "-n"), help="workers to start", rule=whole(0)
    )
    keys: str | bool | None = setting(
        None,
        flags=("--keys", "-k"),
        metavar="DIR",
        help=KEYS_HELP + "; workers read scheduler.key and worker.key_secret there",
        rule=KEYS_RULE,
    )
    heartbeat_interval_seconds: float = setting(
        _AGENT.heartbeat_interval_seconds,
        flags=("--heartbeat-interval-seconds", "-hi"),
        help="how often each worker reports to the scheduler",
        rule=number(above=0),
    )
    per_worker_queue_size: int = setting(
        _AGENT.queue_capacity,
        flags=("--per-worker-queue-size", "-qs"),
        help="most tasks the scheduler may queue on one worker",
        rule=whole(1),
    )
    death_timeout_seconds: float = setting(
        _AGENT.scheduler_timeout_seconds,
        flags=("--death-timeout-seconds", "-dt"),
        help="a worker exits when no scheduler has answered for this long; meanwhile it says hello until one does "
        "(a scheduler that restarts at the address gets its workers back)",
        rule=number(above=0),
    )
    exit_with_scheduler: bool = setting(
        _AGENT.exit_with_scheduler,
        help="stop the workers when the scheduler stops cleanly (a signal); off by default: they wait for a scheduler "
        "to come back at the address (up to --death-timeout-seconds). A client's shutdown() stops them either way",
        rule=flag(),
    )
    max_processors_per_worker: int = setting(
        _AGENT.max_processors,
        flags=("--max-processors-per-worker", "-mp"),
        help="most processors one worker runs at once (more than one only while tasks wait on nested tasks)",
        rule=whole(1),
    )
    memory_limit_bytes: int = setting(
        _AGENT.memory_limit_bytes,
        flags=("--memory-limit", "-ml"),
        metavar="SIZE",
        help="most memory (RSS) one processor may use, like 4G or 512M: a processor over it is stopped and the task "
        "it runs fails with TaskMemoryError; 0: no limit",
        rule=Rule("a number of bytes like 512M or 4G, or 0 (no limit)", (int, str), None, _memory_limit),
    )
    capabilities: tuple[str, ...] = setting(
        _AGENT.capabilities,
        flags=("--capability",),
        metavar="CAPABILITY",
        help="a capability the workers offer, NAME or NAME=VALUE (e.g. gpu, licence=matlab); repeat for several. Tasks "
        "that require capabilities (client.options(capabilities=...)) run only on workers offering all of them. "
        "Every worker offers payload=python as well (docs/capabilities.md) (default: none, payload=python only)",
        rule=Rule("a list of capabilities", (tuple, str), None, _capabilities, many="append"),  # str: refused there
    )
    unit: str = setting(
        "",
        metavar="NAME",
        help="the unit a worker manager started these workers in (scaler_worker_manager passes it; "
        "docs/deploying/autoscaling.md): the scheduler retires them by unit when they are idle. Leave it out when "
        "starting workers by hand",
        rule=any_text(),
    )
    worker_name_prefix: str = setting(
        factory=hostname,
        help="workers are named PREFIX-<pid>-<index>; a restarted worker keeps its name",
        rule=text(),
    )

    def agent_config(self, name: str, host: str = "") -> AgentConfig:
        """The workers' agent core's part of these settings: `name` the prefix of the workers' names."""
        return AgentConfig(
            name=name,
            hostname=host,
            queue_capacity=self.per_worker_queue_size,
            heartbeat_interval_seconds=self.heartbeat_interval_seconds,
            scheduler_timeout_seconds=self.death_timeout_seconds,
            max_processors=self.max_processors_per_worker,
            memory_limit_bytes=self.memory_limit_bytes,
            capabilities=self.capabilities,
            unit=self.unit,
            exit_with_scheduler=self.exit_with_scheduler,
        )
