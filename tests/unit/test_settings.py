"""The settings model (scaler.settings): each setting declared once, and the command line, the Python keywords of
SchedulerClusterCombo / Cluster / Scheduler and a mapping (a configuration file's) all made from that one declaration.
Pure: no process is started here (a bad keyword is refused before anything starts)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import os
from pathlib import Path
from typing import Any

import pytest

import scaler
from scaler.cluster.cluster import Cluster
from scaler.cluster.combo import LOGGING_LEVEL, LOGGING_PATHS, SchedulerClusterCombo
from scaler.cluster.scheduler import Scheduler
from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.worker.agent import AgentConfig
from scaler.entry_points.cluster import parser as cluster_parser
from scaler.entry_points.scheduler import parser as scheduler_parser
from scaler.protocol.capabilities import MAX_OFFERED
from scaler.protocol.records import DEFAULT_OPTIONS, TaskBatch, TaskOptions
from scaler.settings.cli import long_flag, settings_from
from scaler.settings.common import ProcessSettings
from scaler.settings.legacy import IGNORED
from scaler.settings.model import SettingError, Settings, SettingTypeError, spec_of
from scaler.settings.scheduler import SchedulerSettings
from scaler.settings.worker import ClusterSettings

A = "tcp://127.0.0.1:8516"
PACKAGE = Path(scaler.__file__).resolve().parent
COMPONENTS: list[type[Settings]] = [SchedulerSettings, ClusterSettings]
# keyword -> setting, where a class's keyword is not the setting's name
ALIASES = {
    "scheduler_cpu": "cpu",
    "memory_limit": "memory_limit_bytes",
    "load_balance_seconds": "balance_interval_seconds",
}


# ---------------------------------------------------------------------------------------------- declarations
@pytest.mark.parametrize("cls", COMPONENTS)
def test_every_setting_has_help_a_rule_and_a_default_the_rule_takes(cls: type[Settings]) -> None:
    defaults = cls()  # every default is checked by its own rule when the settings are made
    for name, field in cls.fields().items():
        spec = spec_of(field)
        assert spec.help.strip() and spec.rule.allowed, name
        assert spec.rule.check(getattr(defaults, name), name) == getattr(defaults, name)


@pytest.mark.parametrize("cls", COMPONENTS)
def test_flags_are_unique_and_long_ones_are_named_after_the_settings(cls: type[Settings]) -> None:
    seen: set[str] = set()
    for name, field in cls.fields().items():
        spec = spec_of(field)
        flags = spec.flags or (long_flag(name, spec),)
        assert not seen & set(flags), flags
        seen |= set(flags)
        assert spec.positional or flags[0].startswith("--"), flags


def test_the_core_settings_take_the_cores_defaults() -> None:
    """The cores keep their own defaults (tests build them without settings): the settings do not write them again."""
    settings = SchedulerSettings()
    assert settings.core_config() == SchedulerConfig()
    workers = ClusterSettings()
    assert workers.agent_config(AgentConfig.name) == AgentConfig()


def test_core_config_and_agent_config_carry_the_values() -> None:
    settings = SchedulerSettings.from_mapping(
        {"worker_timeout_seconds": 3, "max_payload_bytes": "1M", "balance_interval_seconds": 0.5}
    )
    config = settings.core_config()
    assert (config.worker_timeout_seconds, config.max_payload_bytes, config.balance_interval_seconds) == (
        3.0,
        1 << 20,
        0.5,
    )
    agent = ClusterSettings.from_mapping(
        {"per_worker_queue_size": 7, "memory_limit_bytes": "2G", "capabilities": ["gpu"]}
    ).agent_config("w", "h")
    assert (agent.name, agent.hostname, agent.queue_capacity, agent.memory_limit_bytes) == ("w", "h", 7, 2 << 30)
    assert agent.capabilities == ("gpu",)


# ---------------------------------------------------------------------------------------------- a mapping
def test_from_mapping_gives_the_values_and_the_other_defaults() -> None:
    settings = SchedulerSettings.from_mapping(
        {"address": A, "worker_timeout_seconds": 5, "protected": False, "logging_paths": ["/dev/stderr"]}
    )
    assert settings.address == A and settings.worker_timeout_seconds == 5.0 and settings.protected is False
    assert settings.logging_paths == ("/dev/stderr",)  # a list (TOML's arrays) is kept as a tuple
    assert settings.client_timeout_seconds == SchedulerConfig().client_timeout_seconds


@pytest.mark.parametrize("cls", COMPONENTS)
def test_as_mapping_round_trips(cls: type[Settings]) -> None:
    settings = cls.from_mapping({"address": A})
    assert cls.from_mapping(settings.as_mapping()) == settings


def test_an_unknown_key_is_refused_with_the_closest_names() -> None:
    with pytest.raises(SettingError, match="ClusterSettings has no setting 'num_workers': did you mean n_workers") as e:
        ClusterSettings.from_mapping({"num_workers": 2})
    assert e.value.name == "num_workers"
    with pytest.raises(SettingError, match="has no setting 'worker-timeout-seconds': did you mean worker_timeout"):
        SchedulerSettings.from_mapping({"worker-timeout-seconds": 2})
    with pytest.raises(SettingError, match="has no setting 'zzz': the settings are event_loop, "):
        SchedulerSettings.from_mapping({"zzz": 1})


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("worker_timeout_seconds", "10", "worker_timeout_seconds must be a number more than 0, not '10'"),
        ("worker_timeout_seconds", True, "worker_timeout_seconds must be a number more than 0, not True"),
        ("max_task_retries", 1.0, "max_task_retries must be a whole number 0 or more, not 1.0"),
        ("protected", "yes", "protected must be True or False, not 'yes'"),
        ("monitor_task_data", 1, "monitor_task_data must be one of auto, on, off, not 1"),
        ("logging_paths", [1], "logging_paths: a path to log to is text, not 1"),
        ("keys", True, "keys must be a keys directory, None"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_key(key: str, value: object, said: str) -> None:
    with pytest.raises(SettingTypeError) as caught:
        SchedulerSettings.from_mapping({key: value})
    assert said in str(caught.value) and caught.value.name == key
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("worker_timeout_seconds", 0, "worker_timeout_seconds must be a number more than 0, not 0"),
        ("client_timeout_seconds", math.nan, "client_timeout_seconds must be a number more than 0, not nan"),
        ("capability_grace_seconds", -1, "capability_grace_seconds must be 0 or more, not -1"),
        ("max_connections", 0, "max_connections must be a whole number 1 or more, not 0"),
        ("max_payload_bytes", "lots", "max_payload_bytes: a size must be bytes or a number with K, M, G or T"),
        ("event_loop", "fast", "event_loop must be one of builtin, uvloop, not 'fast'"),
        ("cpu", 99999, "cpu: CPU 99999 is not one this process may run on"),
        ("address", "127.0.0.1:8516", "address must look like tcp://HOST:PORT or ipc:///PATH"),
        ("logging_level", "LOUD", "logging_level: the logging level must be one of DEBUG, INFO"),
        ("logging_paths", [A], f"logging_paths: '{A}' is an address, not a file to log to"),
    ],
)
def test_a_value_out_of_range_is_a_value_error_naming_the_key(key: str, value: object, said: str) -> None:
    with pytest.raises(SettingError) as caught:
        SchedulerSettings.from_mapping({key: value})
    assert said in str(caught.value) and caught.value.name == key
    assert not isinstance(caught.value, TypeError)


def test_a_mapping_is_needed() -> None:
    with pytest.raises(TypeError, match="settings must be a mapping"):
        SchedulerSettings.from_mapping([("address", A)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "given, kept", [(1 << 20, 1 << 20), ("512M", 512 << 20), ("8GiB", 8 << 30), ("1.5G", 3 << 29), ("2k", 2048)]
)
def test_sizes_are_bytes_or_text_with_a_unit(given: int | str, kept: int) -> None:
    assert SchedulerSettings(max_payload_bytes=given).max_payload_bytes == kept  # type: ignore[arg-type]
    assert ClusterSettings(memory_limit_bytes=given).memory_limit_bytes == kept  # type: ignore[arg-type]


@pytest.mark.parametrize("given", [0, -1, "", "G", "8 gigs", True])
def test_bad_sizes_are_refused(given: object) -> None:
    with pytest.raises(ValueError, match="max_payload_bytes"):
        SchedulerSettings(max_payload_bytes=given)  # type: ignore[arg-type]


def test_a_memory_limit_of_0_is_none() -> None:
    assert ClusterSettings.from_mapping({"memory_limit_bytes": "0"}).memory_limit_bytes == 0
    with pytest.raises(ValueError, match="memory_limit_bytes: a size must be positive"):
        ClusterSettings(memory_limit_bytes=-1)


def test_capabilities_are_checked_as_a_whole() -> None:
    assert ClusterSettings.from_mapping({"capabilities": ["gpu", "gpu", "lang=ts"]}).capabilities == ("gpu", "lang=ts")
    with pytest.raises(ValueError, match="capabilities must be a list of capabilities, not a single str"):
        ClusterSettings(capabilities="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a Python worker runs Python payloads only"):
        ClusterSettings.from_mapping({"capabilities": ["payload=json"]})


# ---------------------------------------------------------------------------------------------- the command line
def test_the_command_line_gives_what_the_mapping_gives() -> None:
    p = scheduler_parser()
    argv = ["--worker-timeout-seconds", "3", "--no-protected", "--max-payload-bytes", "1M", "--cpu", "none", A]
    from_cli = settings_from(p, SchedulerSettings, p.parse_args(argv))
    mapping = {"address": A, "worker_timeout_seconds": 3, "protected": False, "max_payload_bytes": 1 << 20}
    assert from_cli == SchedulerSettings.from_mapping({**mapping, "cpu": "none", "logging_paths": ["/dev/stdout"]})
    c = cluster_parser()
    workers = settings_from(c, ClusterSettings, c.parse_args(["-n", "2", "--capability", "gpu", "-ml", "1G", A]))
    assert (workers.n_workers, workers.capabilities, workers.memory_limit_bytes) == (2, ("gpu",), 1 << 30)


@pytest.mark.parametrize(("parser", "cls"), [(scheduler_parser, SchedulerSettings), (cluster_parser, ClusterSettings)])
def test_each_flag_defaults_to_its_setting(parser: Any, cls: type[Settings]) -> None:
    p: argparse.ArgumentParser = parser()
    parsed = p.parse_args([A])
    for name in cls.fields():
        default = cls.default(name)
        assert getattr(parsed, name) == (list(default) if isinstance(default, tuple) else default) or name == "address"
    assert settings_from(p, cls, parsed) == cls.from_mapping({"address": A})


def test_a_refusal_seen_only_in_the_whole_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    c = cluster_parser()
    args = c.parse_args([*(f"--capability=c{i}" for i in range(MAX_OFFERED)), A])  # payload=python makes one more
    with pytest.raises(SystemExit) as stopped:
        settings_from(c, ClusterSettings, args)
    assert stopped.value.code == 2
    assert "--capability: a worker offers at most" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the Python classes
def _keywords(function: Any) -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(function).parameters.items() if name != "self"}


@pytest.mark.parametrize(
    ("constructor", "settings"),
    [
        (SchedulerClusterCombo.__init__, [SchedulerSettings, ClusterSettings]),
        (Cluster.__init__, [ClusterSettings]),
        (Scheduler.__init__, [SchedulerSettings]),
    ],
)
def test_the_classes_keywords_default_to_the_settings(constructor: Any, settings: list[type[Settings]]) -> None:
    """Every keyword that is a setting defaults to the setting's default (None: "the setting's", as n_workers); the
    others are scaler 1.9.9's, taken and ignored, with the defaults written once in scaler.settings.legacy."""
    ignored = dataclasses.asdict(IGNORED)
    for name, parameter in _keywords(constructor).items():
        setting = ALIASES.get(name, name)
        owners = [cls for cls in settings if setting in cls.fields()]
        if name in ("logging_level", "logging_paths") and constructor is SchedulerClusterCombo.__init__:
            assert parameter.default in (LOGGING_LEVEL, LOGGING_PATHS)  # the combo's own: quiet, to stderr
        elif name == "logging_path":  # Scheduler: 1.9.9's name of logging_paths
            assert parameter.default == ProcessSettings.default("logging_paths")
        elif name == "address":
            assert parameter.default in (None, inspect.Parameter.empty)  # none: a free local port (the combo)
        elif owners:
            expected = {owner.default(setting) for owner in owners if setting not in ("n_workers", "address")}
            assert parameter.default is None or {parameter.default} == expected, (name, parameter.default, expected)
        elif name == "per_worker_queue_size":  # Scheduler: a worker's setting, ignored there
            assert parameter.default == ClusterSettings.default(name)
        elif name not in ("worker_names", "address"):
            assert name in ignored and parameter.default == ignored[name], name


# Parameters named as a setting with a literal default, outside scaler.settings, and why they may have one: each
# must equal the setting's default (checked below), and a new one fails this test.
ALLOWED_LITERALS = {
    ("core/scheduler/config.py", "SchedulerConfig"): "the scheduler core's own defaults: the settings take them",
    ("core/worker/agent.py", "AgentConfig"): "the agent core's own defaults: the settings take them",
    ("scheduler/server.py", "__init__"): "SchedulerServer, built directly by tests",
}
OTHER_MEANINGS = {
    "protocol/records.py": "message fields (protected, max_payload_bytes: what a welcome says)",
    "client/client.py": "the client's own heartbeat",
    "integrations/ray.py": "ray.init's logging level, the integration's choice",
    "conformance/scheduler_checks.py": "the conformance kit's fake peers",
}


def _literal_defaults(path: Path) -> list[tuple[str, str, Any]]:
    """(scope, parameter or field, value) of every literal default in the module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found += [(node.name, a.arg, d) for a, d in pairs]
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
                    found.append((node.name, statement.target.id, statement.value))
    literals = []
    for scope, name, value in found:
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue  # a name: the default is written elsewhere
        if literal is not None:
            literals.append((scope, name, literal))
    return literals


def test_each_default_is_written_once() -> None:
    """No parameter or field named as a setting has a literal default outside scaler.settings, but for the cores'
    configs (the settings take their defaults from them) and a few listed; those equal the setting's default."""
    names = {name for cls in COMPONENTS for name in cls.fields()} | set(ALIASES) | {"log_level", "log_paths"}
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        if where.startswith("settings/") or where in OTHER_MEANINGS:
            continue
        for scope, name, literal in _literal_defaults(path):
            if name not in names:
                continue
            if (where, scope) not in ALLOWED_LITERALS:
                strays.append(f"{where}: {scope}({name}={literal!r})")
                continue
            setting = {"log_level": "logging_level", "log_paths": "logging_paths"}.get(name, ALIASES.get(name, name))
            defaults = [cls.default(setting) for cls in COMPONENTS if setting in cls.fields()]
            if defaults:
                assert literal in defaults, f"{where}: {scope}({name}={literal!r}) is not the setting's {defaults}"
    assert strays == [], "take these defaults from scaler.settings:\n  " + "\n  ".join(strays)


def test_the_classes_check_their_keywords_before_starting_anything() -> None:
    with pytest.raises(ValueError, match="scheduler_cpu: CPU 99999"):
        SchedulerClusterCombo(n_workers=0, scheduler_cpu=99999)
    with pytest.raises(ValueError, match="memory_limit: a size must be"):
        SchedulerClusterCombo(n_workers=0, memory_limit="lots")
    with pytest.raises(ValueError, match="load_balance_seconds must be 0 or more, not -1"):
        SchedulerClusterCombo(n_workers=0, load_balance_seconds=-1)
    with pytest.raises(TypeError, match="heartbeat_interval_seconds must be a number more than 0, not '2'"):
        SchedulerClusterCombo(n_workers=0, heartbeat_interval_seconds="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_workers must be a whole number 0 or more, not -1"):
        Cluster(A, n_workers=-1)
    with pytest.raises(ValueError, match="death_timeout_seconds must be a number more than 0"):
        Cluster(A, worker_names=["a"], death_timeout_seconds=0)
    with pytest.raises(ValueError, match="load_balance_seconds must be 0 or more"):
        Scheduler(A, load_balance_seconds=-2)


def test_cluster_from_settings() -> None:
    settings = ClusterSettings.from_mapping({"address": A, "n_workers": 3, "heartbeat_interval_seconds": 0.5})
    cluster = Cluster.from_settings(settings)
    assert cluster.settings is settings and cluster._n_workers == 3 and cluster._heartbeat_interval_seconds == 0.5
    assert cluster._agent_config.heartbeat_interval_seconds == 0.5
    with pytest.raises(ValueError, match="no address"):
        Cluster.from_settings(ClusterSettings())
    assert not cluster.is_alive() and os.getpid() == cluster._parent_pid


# ---------------------------------------------------------------------------------------------- task options
def test_task_options_by_name_and_by_position() -> None:
    options = TaskOptions(timeout_ms=1500, retries=2, priority=-1)
    assert (options.timeout_ms, options.retries, options.priority) == options == (1500, 2, -1)
    assert options[1] == 2 and DEFAULT_OPTIONS == (0, 0, 0) == TaskOptions()


def test_a_batch_gives_each_tasks_options_by_name_one_shared_tuple_for_equal_ones() -> None:
    batch = TaskBatch(
        [1, 2, 3], [9, 9, 9], bytes(3), [0, 0, 0], [], None, [], timeouts_ms=[0, 5, 5], retries=bytes([1, 2, 2])
    )
    options = batch.options()
    assert options is not None and [type(o) for o in options] == [TaskOptions] * 3
    assert options[0] == TaskOptions(retries=1) and options[1] == TaskOptions(timeout_ms=5, retries=2)
    assert options[1] is options[2]
