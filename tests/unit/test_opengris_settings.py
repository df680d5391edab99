"""opengris-scaler 2.x command lines and config files turned into this version's (scaler.settings.opengris): the
pure translation; tests/integration/test_opengris_commands.py starts real processes with them."""

from __future__ import annotations

import pytest

from scaler.settings.opengris import Refused, translate_argv, translate_document, translate_table


def test_command_lines() -> None:
    assert translate_argv(["tcp://h:1", "-pwc", "gpu, linux,cpu=8"], "cluster") == [
        "tcp://h:1",
        *("--capability", "gpu", "--capability", "linux", "--capability", "cpu=8"),
    ]
    assert translate_argv(["--per-worker-capabilities=gpu", "-n", "2"], "cluster") == ["--capability", "gpu", "-n", "2"]
    assert translate_argv(["tcp://h:1", "--allocate-policy=even", "-osa", "tcp://h:2", "-ll", "INFO"], "scheduler") == [
        "tcp://h:1",
        "-ll",
        "INFO",
    ]
    assert translate_argv(["--web-port", "8081"], "ui") == ["--port", "8081"]
    assert translate_argv(["-pwc", "gpu"], "scheduler") == ["-pwc", "gpu"]  # (not the scheduler's: argparse says so)
    with pytest.raises(Refused, match="scaler_worker_manager"):
        translate_argv(["--adapter-webhook-url", "http://x"], "scheduler")


def test_config_files() -> None:
    document = translate_document(
        {
            "scheduler": {"scheduler_address": "tcp://h:1", "allocate_policy": "capability"},
            "cluster": {"scheduler_address": "tcp://h:1", "per_worker_capabilities": "a,b", "capability": ["c"]},
            "object_storage_server": {"object_storage_address": "tcp://h:2"},
            "webui": {"web_port": 8081},
        },
        "f.toml",
    )
    assert document == {
        "scheduler": {"address": "tcp://h:1"},
        "cluster": {"address": "tcp://h:1", "capability": ["c", "a", "b"]},
        "ui": {"port": 8081},
    }
    assert translate_table({"scheduler_address": "tcp://h:1"}, "scheduler", "f.toml") == {"address": "tcp://h:1"}
    with pytest.raises(Refused, match=r"\[webui\].*and \[ui\]"):
        translate_document({"webui": {}, "ui": {}}, "f.toml")
    with pytest.raises(Refused, match=r"\[symphony_worker_adapter\].*scaler_worker_manager"):
        translate_document({"scheduler": {}, "symphony_worker_adapter": {}}, "f.toml")
    with pytest.raises(Refused, match="allocate_policy = 'fancy'"):
        translate_table({"allocate_policy": "fancy"}, "scheduler", "f.toml")
    assert translate_table({"task_timeout_seconds": 600, "num_of_workers": 2}, "cluster", "f.toml") == {
        "num_of_workers": 2
    }  # (ignored, said on stderr: the task's timeout is the client's here)
    assert translate_argv(["--task-timeout-seconds", "600", "tcp://h:1"], "cluster") == ["tcp://h:1"]
    untouched = {"top": {"monitor_address": "x"}}
    assert translate_document(untouched, "f.toml") is untouched
