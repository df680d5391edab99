"""scaler 1.9.9's scaler.utility.network_util (see scaler.utility)."""

from __future__ import annotations

import socket


def get_available_tcp_port(hostname: str = "127.0.0.1") -> int:
    """A TCP port free on `hostname` now (another process may take it before you bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((hostname, 0))
        return int(probe.getsockname()[1])
