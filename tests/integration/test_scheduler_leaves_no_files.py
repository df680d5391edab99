"""The schedulers that scaler.SchedulerClusterCombo and scaler.cluster.scheduler.Scheduler start remove their monitor
socket when they stop (scaler_scheduler's are in tests/e2e/test_cli.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from scaler import SchedulerClusterCombo
from scaler.cluster.scheduler import Scheduler
from scaler.io.ipc import ipc_path
from tests.helpers import free_address, wait_until

pytestmark = pytest.mark.timeout(30)


def socket_path(monitor_address: str) -> Path:
    path = ipc_path(monitor_address)
    assert path is not None, monitor_address
    return Path(path)


def listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def test_the_combo_scheduler_removes_its_monitor_socket() -> None:
    combo = SchedulerClusterCombo(n_workers=0)
    path = socket_path(combo.monitor_address)
    try:
        assert path.is_socket()
    finally:
        combo.shutdown()
    assert not path.exists(), f"{path} is left behind"


def test_the_1_9_9_scheduler_process_removes_its_monitor_socket() -> None:
    scheduler = Scheduler(address=free_address(), logging_level="WARNING")
    path = socket_path(scheduler.monitor_address)
    scheduler.start()
    try:
        # listening, not just there: a socket file another scheduler left on this port's path may be there already
        wait_until(lambda: listening(path), timeout=15, what=f"the scheduler to listen on {path}")
    finally:
        scheduler.terminate()
        scheduler.join(10)
    assert scheduler.exitcode == 0
    assert not path.exists(), f"{path} is left behind"


def test_a_bad_logging_level_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="logging level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"):
        Scheduler(address=free_address(), logging_level="LOUD")
    with pytest.raises(ValueError, match="not 'LOUD'"):
        SchedulerClusterCombo(n_workers=0, logging_level="LOUD")


def test_a_logging_path_that_cannot_be_written_is_refused_before_anything_starts(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "x.log"
    with pytest.raises(ValueError, match=f"cannot log to {missing}: No such file or directory"):
        Scheduler(address=free_address(), logging_paths=(str(missing),))
    with pytest.raises(ValueError, match=f"cannot log to {missing}"):
        Scheduler(address=free_address(), logging_path=(str(missing),))  # scaler 1.9.9's name
    with pytest.raises(ValueError, match=f"cannot log to {tmp_path}: Is a directory"):
        SchedulerClusterCombo(n_workers=0, logging_paths=(str(tmp_path),))
