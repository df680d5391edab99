"""Addresses: what a scheduler address must look like, the monitor address that goes with it, whether only this machine
can reach one, this host's name."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

from scaler.io.ipc import private_dir

logger = logging.getLogger(__name__)


def hostname() -> str:
    return socket.gethostname()


def parse_address(address: str) -> tuple[str, str]:
    """('tcp', 'host:port') from 'tcp://host:port'; ValueError with a clear message otherwise."""
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc") or not rest:
        raise ValueError(f"address must look like tcp://HOST:PORT or ipc:///PATH, not {address!r}")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"address must look like tcp://HOST:PORT with a port from 1 to 65535, not {address!r}")
    return scheme, rest


def documented_monitor_address(address: str) -> str:
    """The monitor address the documents show for a scheduler at `address`: ipc:///tmp/<host>_<port>_monitor for
    tcp://<host>:<port> (ipc.find_monitor takes it to where the socket is), <address>_monitor for ipc and inproc."""
    scheme, rest = parse_address(address)
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc:///tmp/{host}_{port}_monitor"
    return f"{scheme}://{rest}_monitor"


def default_monitor_address(address: str) -> str:
    """Where a scheduler at `address` given no monitor address publishes its monitor. For tcp://<host>:<port>:
    <host>_<port>_monitor in a folder of this user's only (ipc.private_dir: $XDG_RUNTIME_DIR/scaler or
    /tmp/scaler-<uid>, made 0700), with a WARNING when /tmp/scaler-<uid> is not this user's and a fresh folder is
    used instead. For ipc and inproc: <address>_monitor, next to the scheduler's own socket, where its user chose."""
    documented = documented_monitor_address(address)
    if parse_address(address)[0] != "tcp":
        return documented
    folder, refused = private_dir()
    monitor = "ipc://" + os.path.join(folder, os.path.basename(documented))
    if refused is not None:
        logger.warning(
            "%s: it is not used for the monitor socket (another user could take the monitor's place there, or serve "
            "scaler_top a false status); the monitor address is %s, in a fresh private folder, as the scheduler "
            "logs at start",
            refused,
            monitor,
        )
    return monitor


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach `address`: ipc and inproc, or tcp on a loopback host."""
    scheme, rest = parse_address(address)
    if scheme != "tcp":
        return True
    host = rest.rpartition(":")[0].strip("[]")
    if host in ("localhost", "*"):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0])).is_loopback for info in infos)
