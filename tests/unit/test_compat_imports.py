"""scaler 1.9.9's import paths that user code used (issue 29): scaler.utility.* and scaler.io.config work on this
version's ground, and its other internal modules say where they went. In a fresh interpreter each, as a script
would import them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scaler.core.scheduler.config import SchedulerConfig


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_kept_names_work() -> None:
    from scaler.errors import ClientClosedError, ConnectionFailedError, TaskFailedError
    from scaler.io.config import DEFAULT_HEARTBEAT_INTERVAL_SECONDS, DEFAULT_IO_THREADS, DEFAULT_WORKER_TIMEOUT_SECONDS
    from scaler.utility.exceptions import ClientShutdownException, DisconnectedError, ProcessorDiedError
    from scaler.utility.logging.scoped_logger import ScopedLogger
    from scaler.utility.logging.utility import setup_logger
    from scaler.utility.network_util import get_available_tcp_port
    from scaler.utility.zmq_config import ZMQConfig, ZMQType

    assert DEFAULT_WORKER_TIMEOUT_SECONDS == SchedulerConfig().worker_timeout_seconds  # this version's default
    assert DEFAULT_HEARTBEAT_INTERVAL_SECONDS == 2 and DEFAULT_IO_THREADS == 1
    assert ProcessorDiedError is TaskFailedError and DisconnectedError is ConnectionFailedError
    assert ClientShutdownException is ClientClosedError
    assert 0 < get_available_tcp_port() < 65536
    address = ZMQConfig.from_string("tcp://127.0.0.1:2345")
    assert address == "tcp://127.0.0.1:2345" and isinstance(address, str) and address.to_address() == address
    assert (address.type, address.host, address.port) == (ZMQType.tcp, "127.0.0.1", 2345)
    with pytest.raises(ValueError):
        ZMQConfig.from_string("127.0.0.1:2345")
    with ScopedLogger("a step"):
        pass
    assert callable(setup_logger)
    with pytest.raises(ValueError, match="fileConfig"):
        setup_logger(logging_config_file="logging.conf")


def test_the_other_modules_say_where_they_went() -> None:
    for module in ("scaler.utility.queues.async_indexed_queue", "scaler.io.async_binder", "scaler.utility.mixins"):
        done = run(f"import {module}")
        assert done.returncode == 1, done.stderr
        assert "ModuleNotFoundError" in done.stderr and "internal module of scaler 1.9.9" in done.stderr
        assert "scaler.utility keeps network_util" in done.stderr
    done = run("from scaler.io.config import CLEANUP_INTERVAL_SECONDS")
    assert "an internal constant of scaler 1.9.9" in done.stderr
    assert run("import scaler.io.addresses, scaler.utility.network_util").returncode == 0  # (real ones still load)
