"""scaler_keygen as a user runs it: the installed script, its report, its help and its errors."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from scaler.security.keys import load_peer_keys, load_server_keys, read_authorized

KEYGEN = Path(sys.executable).parent / "scaler_keygen"


def keygen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KEYGEN), *args], capture_output=True, text=True, timeout=60, check=False)


def test_keygen_creates_the_directory_and_reports_each_file(tmp_path: Path) -> None:
    root = tmp_path / "keys"
    done = keygen(str(root), "--client", "alice", "--worker", "gpu1", "--worker", "gpu2", "--monitor", "ops")
    assert done.returncode == 0, done.stderr
    created = [
        "scheduler.key",
        "scheduler.key_secret",
        "client.key_secret",
        "worker.key_secret",
        "monitor.key_secret",
        "authorized_clients/client.key",
        "authorized_workers/worker.key",
        "authorized_monitors/monitor.key",
        "authorized_clients/alice.key",
        "alice/scheduler.key",
        "alice/client.key_secret",
        "authorized_workers/gpu1.key",
        "gpu1/worker.key_secret",
        "authorized_workers/gpu2.key",
        "authorized_monitors/ops.key",
        "ops/scheduler.key",
        "ops/monitor.key_secret",
    ]
    first_line = done.stdout.splitlines()[0]
    assert first_line.startswith(f"Created in {root}: ")
    for name in created:
        assert name in first_line.split(": ", 1)[1].split(", ")
        assert (root / name).is_file()
    names = ("scheduler.key_secret", "worker.key_secret", "client.key_secret", "monitor.key_secret", "alice", "ops")
    for name in (*names, "gpu1", "gpu2", "authorized_monitors"):
        assert str(root / name) in done.stdout
    assert "every monitor machine:" in done.stdout and "scaler_top or scaler_ui" in done.stdout, done.stdout
    assert stat.S_IMODE(os.stat(root / "alice" / "client.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "ops" / "monitor.key_secret").st_mode) == 0o600
    assert load_peer_keys(root / "gpu2", "worker").server_public == load_server_keys(root).pair.public
    assert load_peer_keys(root / "ops", "monitor").server_public == load_server_keys(root).pair.public
    assert len(read_authorized(root)[0]) == 7


def test_keygen_again_keeps_everything(tmp_path: Path) -> None:
    assert keygen(str(tmp_path)).returncode == 0
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    done = keygen(str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Nothing to create")
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_help_shows_loopback_examples() -> None:
    done = keygen("-h")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps lines at the terminal's width
    assert "127.0.0.1" in text
    assert "--client NAME" in text and "--worker NAME" in text and "--monitor NAME" in text
    assert "authorized_monitors" in text and "scaler_top" in text
    assert "scaler_scheduler --keys DIR tcp://127.0.0.1:8516" in text


def test_an_invalid_name_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    done = keygen(str(tmp_path / "keys"), "--client", "bad name")
    assert done.returncode == 2
    assert "scaler_keygen: error:" in done.stderr and "bad name" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "keys").exists()


def test_a_name_already_used_by_the_other_role_exits_2(tmp_path: Path) -> None:
    assert keygen(str(tmp_path), "--client", "alice").returncode == 0
    done = keygen(str(tmp_path), "--worker", "alice")
    assert done.returncode == 2
    assert "error" in done.stderr and "alice" in done.stderr
    assert not (tmp_path / "authorized_workers" / "alice.key").exists()
