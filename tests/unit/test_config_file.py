"""--config FILE.toml (scaler.settings.config_file) with the commands' real parsers: keys are the long option names
with _, the command line wins, every key and value is checked with an error naming the file, the table and the key,
and the tables of a stack's file take the scheduler's address, monitor address and keys."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from scaler.entry_points import cluster, scheduler, worker_manager
from scaler.entry_points.stack import parts_of
from scaler.monitor import top, ui
from scaler.settings.cli import settings_from
from scaler.settings.config_file import ConfigError, apply_config, read_document
from scaler.settings.scheduler import SchedulerSettings
from scaler.settings.worker import ClusterSettings

pytestmark = pytest.mark.timeout(30)

STACK = """
[scheduler]
address = "tcp://127.0.0.1:8516"
keys = "/srv/keys"
max_task_retries = 5

[cluster]
num_of_workers = 3
capability = ["gpu", "memory=8G"]

[[worker_manager]]
type = "local"
max_workers = 2

[[worker_manager]]
type = "slurm"
partition = "batch"
max_workers = 64
tier = 1

[ui]
port = 8090
"""


def write(tmp_path: Path, text: str, name: str = "scaler.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def usage_error(
    parser: argparse.ArgumentParser, words: list[str], section: str, capsys: pytest.CaptureFixture[str]
) -> str:
    with pytest.raises(SystemExit) as exited:
        apply_config(parser, words, section)
        parser.parse_args(words)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_flat_file_gives_a_command_its_settings_and_the_command_line_wins(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'address = "tcp://127.0.0.1:9000"\nmax_task_retries = 7\nprotected = false\nlogging_level = "WARNING"\n',
    )
    p = scheduler.parser()
    words = ["--config", path, "--max-task-retries", "2"]
    apply_config(p, words, "scheduler")
    settings = settings_from(p, SchedulerSettings, p.parse_args(words))
    assert settings.address == "tcp://127.0.0.1:9000"  # the positional, from the file
    assert settings.max_task_retries == 2  # the command line wins
    assert settings.protected is False and settings.logging_level == "WARNING"


def test_a_stack_file_gives_each_command_its_own_table_and_the_schedulers_address_and_keys(tmp_path: Path) -> None:
    path = write(tmp_path, STACK)
    p = cluster.parser()
    words = ["--config", path]
    apply_config(p, words, "cluster")
    settings = settings_from(p, ClusterSettings, p.parse_args(words))
    assert settings.address == "tcp://127.0.0.1:8516" and settings.keys == "/srv/keys"
    assert settings.n_workers == 3 and set(settings.capabilities) >= {"gpu", "memory=8G"}
    s = scheduler.parser()
    apply_config(s, words, "scheduler")
    assert settings_from(s, SchedulerSettings, s.parse_args(words)).max_task_retries == 5
    u = ui.parser()
    apply_config(u, words, "ui")
    args = u.parse_args(words)
    assert args.port == 8090 and args.monitor_address == "ipc:///tmp/127.0.0.1_8516_monitor"  # found as top finds it


def test_a_worker_manager_reads_its_type_from_the_file_or_the_numbered_table(tmp_path: Path) -> None:
    path = write(tmp_path, STACK)
    _, subs = worker_manager.parser()
    first = ["--config", path, "--config-section", "worker_manager.2"]
    apply_config(subs["slurm"], first, "worker_manager", fixed={"type": "slurm"})
    args = subs["slurm"].parse_args(first)
    assert (args.partition, args.max_workers, args.tier, args.address) == ("batch", 64, 1, "tcp://127.0.0.1:8516")


def test_a_worker_managers_type_from_the_file_runs_that_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, '[[worker_manager]]\ntype = "slurm"\naddress = "tcp://127.0.0.1:1"\nmax_workers = 0\n')
    with pytest.raises(SystemExit) as exited:
        worker_manager.main(["--config", path])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "scaler_worker_manager slurm" in err and "max_workers must be a whole number 1 or more, not 0" in err, err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '[scheduler]\nmax_conections = 5\naddress = "tcp://127.0.0.1:1"\n',
            "has no setting 'max_conections': did you mean max_connections",
        ),
        (
            '[scheduler]\nmax_connections = "lots"\n',
            "scheduler max_connections must be a whole number 1 or more, not 'lots'",
        ),
        ("[scheduler]\nmax_connections = 2.5\n", "max_connections must be a whole number 1 or more, not 2.5"),
        ("[scheduler]\nprotected = 1\n", "scheduler protected must be true or false, not 1"),
        ('[scheduler]\nevent_loop = "tokio"\n', "event_loop must be one of builtin, uvloop, not 'tokio'"),
        ('[scheduler]\nlogging_paths = "/tmp/x"\n', "logging_paths must be a list"),
        ("[schedular]\nport = 1\n", "[schedular] is not a table Scaler knows (did you mean [scheduler]?)"),
        ('address = "tcp://127.0.0.1:1"\n[scheduler]\n', "'address' is outside the tables"),
        ("a = [", "is not valid TOML"),
    ],
)
def test_a_bad_key_or_value_is_a_usage_error_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    path = write(tmp_path, text)
    err = usage_error(scheduler.parser(), ["--config", path], "scheduler", capsys)
    assert path in err and words in err, err


def test_a_missing_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(top.parser(), ["--config", str(tmp_path / "nope.toml")], "top", capsys)
    assert "nope.toml: cannot read it: No such file or directory" in err


def test_several_worker_manager_tables_need_a_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, STACK)
    _, subs = worker_manager.parser()
    err = usage_error(subs["local"], ["--config", path], "worker_manager", capsys)
    assert "has 2 [[worker_manager]] tables: say which, --config-section worker_manager.N" in err


def test_the_stack_checks_every_table_before_starting_anything(tmp_path: Path) -> None:
    parts = parts_of(read_document(write(tmp_path, STACK)), "s.toml")
    assert [(p.section, p.words) for p in parts] == [
        ("scheduler", []),
        ("cluster", []),
        ("worker_manager.1", ["local"]),
        ("worker_manager.2", ["slurm"]),
        ("ui", []),
    ]
    bad = STACK.replace('partition = "batch"', 'partition = "batch"\nsbatch_option = "--qos=low"')
    with pytest.raises(
        ConfigError, match=r"worker_manager\.2 has no setting 'sbatch_option': did you mean sbatch_options"
    ):
        parts_of(read_document(write(tmp_path, bad)), "s.toml")
    with pytest.raises(ConfigError, match=r"needs type = one of 'local', 'slurm'"):
        parts_of(read_document(write(tmp_path, '[[worker_manager]]\ntype = "k8s"\n')), "s.toml")
    with pytest.raises(ConfigError, match=r"\[scheduler\] needs address"):
        parts_of(read_document(write(tmp_path, "[scheduler]\n")), "s.toml")
    with pytest.raises(ConfigError, match="none of the tables scaler starts"):
        parts_of(read_document(write(tmp_path, 'address = "tcp://127.0.0.1:1"\n')), "s.toml")
