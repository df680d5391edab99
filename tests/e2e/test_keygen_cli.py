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
    done = keygen(
        str(root), "--client", "alice", "--worker", "gpu1", "--worker", "gpu2", "--monitor", "ops", "--manager", "slurm"
    )
    assert done.returncode == 0, done.stderr
    created = [
        "scheduler.key",
        "scheduler.key_secret",
        "client.key_secret",
        "worker.key_secret",
        "monitor.key_secret",
        "manager.key_secret",
        "authorized_clients/client.key",
        "authorized_workers/worker.key",
        "authorized_monitors/monitor.key",
        "authorized_managers/manager.key",
        "authorized_clients/alice.key",
        "alice/scheduler.key",
        "alice/client.key_secret",
        "authorized_workers/gpu1.key",
        "gpu1/worker.key_secret",
        "authorized_workers/gpu2.key",
        "authorized_monitors/ops.key",
        "ops/scheduler.key",
        "ops/monitor.key_secret",
        "authorized_managers/slurm.key",
        "slurm/scheduler.key",
        "slurm/manager.key_secret",
    ]
    first_line = done.stdout.splitlines()[0]
    assert first_line.startswith(f"Created in {root}: ")
    for name in created:
        assert name in first_line.split(": ", 1)[1].split(", ")
        assert (root / name).is_file()
    names = ("scheduler.key_secret", "worker.key_secret", "client.key_secret", "monitor.key_secret", "alice", "ops")
    for name in (*names, "gpu1", "gpu2", "authorized_monitors", "manager.key_secret", "authorized_managers", "slurm"):
        assert str(root / name) in done.stdout
    assert "every monitor machine:" in done.stdout and "scaler_top or scaler_ui" in done.stdout, done.stdout
    assert "every manager machine:" in done.stdout and "scaler_worker_manager" in done.stdout, done.stdout
    assert f"manager slurm's machine:  the folder {root / 'slurm'}" in done.stdout, done.stdout
    assert stat.S_IMODE(os.stat(root / "alice" / "client.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "ops" / "monitor.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "slurm" / "manager.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "authorized_managers").st_mode) == 0o755
    assert load_peer_keys(root / "gpu2", "worker").server_public == load_server_keys(root).pair.public
    assert load_peer_keys(root / "ops", "monitor").server_public == load_server_keys(root).pair.public
    assert load_peer_keys(root / "slurm", "manager").server_public == load_server_keys(root).pair.public
    admitted = read_authorized(root)[0]
    assert len(admitted) == 9
    assert sorted(key.name for key in admitted.values() if key.role == "manager") == ["manager", "slurm"]


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
    assert "--manager NAME" in text and "authorized_managers" in text and "scaler_worker_manager" in text
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


def test_a_name_already_used_by_a_manager_exits_2(tmp_path: Path) -> None:
    assert keygen(str(tmp_path), "--manager", "slurm").returncode == 0
    done = keygen(str(tmp_path), "--worker", "slurm")
    assert done.returncode == 2
    assert "'slurm' is already a manager's name" in done.stderr, done.stderr
    assert not (tmp_path / "authorized_workers" / "slurm.key").exists()
    done = keygen(str(tmp_path), "--manager", "manager")
    assert done.returncode == 2 and "cannot be a key name" in done.stderr, done.stderr


def test_keygen_adds_the_manager_key_to_a_directory_made_before_it(tmp_path: Path) -> None:
    """A directory made before manager keys (no manager.key_secret, no authorized_managers/): scaler_keygen DIR adds
    those two files and changes nothing else."""
    assert keygen(str(tmp_path), "--client", "alice").returncode == 0
    (tmp_path / "manager.key_secret").unlink()
    (tmp_path / "authorized_managers" / "manager.key").unlink()
    (tmp_path / "authorized_managers").rmdir()
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert len(read_authorized(tmp_path)[0]) == 4  # still serves as before
    done = keygen(str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"Created in {tmp_path}: manager.key_secret, authorized_managers/manager.key"
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert {path: after[path] for path in before} == before
    assert load_peer_keys(tmp_path, "manager").pair.public in read_authorized(tmp_path)[0]
