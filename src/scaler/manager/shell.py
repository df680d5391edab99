"""A worker manager's session with the scheduler (docs/protocol.md section 8, "Worker managers"): one thread, one
DEALER, a poll with a timeout. It says hello as a manager, reports what it is and runs, heartbeats, and does what
scaleUnits says on its Units (manager/units.py). The scheduler decides; the manager only acts and reports.

The scheduler gone silent (restarted, unreachable): the manager says hello again and reports the units it runs, which
keep running meanwhile. SIGINT/SIGTERM, or the scheduler's shutdown: every unit is stopped (within `stop_seconds`,
then killed), then it says goodbye.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from types import FrameType
from typing import Any

import zmq

from scaler.errors import ProtocolError
from scaler.io.sockets import context, new_dealer, recv_message, send_message
from scaler.manager.units import Units
from scaler.protocol.records import (
    ACCEPTED_BY_MANAGER,
    Disconnect,
    Error,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    ManagerReport,
    Message,
    PeerKind,
    Refused,
    ScaleUnits,
    Shutdown,
    Welcome,
)
from scaler.security.keys import PeerKeys
from scaler.settings.manager import ManagerSettings

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.2  # also how often units are checked for having ended
EXIT_REFUSED = 1


class ManagerShell:
    def __init__(
        self,
        settings: ManagerSettings,
        units: Units,
        keys: PeerKeys | None,
        stop_seconds: float = 10.0,
    ) -> None:
        assert settings.address is not None
        self.settings = settings
        self.address = settings.address
        self.name = settings.name or units.kind
        self.units = units
        self.keys = keys
        self.stop_seconds = stop_seconds
        self.identity = f"M|{socket.gethostname()}|{os.getpid()}|{os.urandom(16).hex()}".encode()
        self.welcomed = False
        self.peer_timeout = 60.0
        self.heard = time.monotonic()
        self.ended: list[tuple[str, str]] = []  # not reported yet
        self._stop: str | None = None
        self.sock: zmq.Socket[Any] | None = None

    # ------------------------------------------------------------------------------------------- lifetime
    def run(self) -> int:
        """Serve until a signal or the scheduler's shutdown; returns the exit code."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        ctx = context()
        self.sock = new_dealer(self.identity, ctx, self.keys)
        self.sock.connect(self.address)
        code = 0
        try:
            code = self._serve()
        finally:
            logger.info("worker manager %s: stopping its %d units", self.name, len(self.units.running()))
            self.units.close(self.stop_seconds)
            if self.welcomed:
                send_message(self.sock, Disconnect(self._stop or "the manager stopped"))
            self.sock.close(linger=500)
        logger.info("worker manager %s: stopped (%s)", self.name, self._stop)
        return code

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        self._stop = f"received {signal.Signals(sig).name}"

    def _serve(self) -> int:
        assert self.sock is not None
        sock = self.sock
        self._hello()
        next_beat = time.monotonic()
        while self._stop is None:
            if sock.poll(int(POLL_SECONDS * 1000)):
                code = self._read()
                if code is not None:
                    return code
            now = time.monotonic()
            self.ended += self.units.ended()
            if self.welcomed and self.ended:
                self._report()
            if now >= next_beat:
                next_beat = now + self.settings.heartbeat_interval_seconds
                if self.welcomed:
                    send_message(sock, Heartbeat())
                if now - self.heard > self.peer_timeout:
                    logger.warning(
                        "worker manager %s: the scheduler at %s has been silent for %.0fs: saying hello again (its "
                        "%d units keep running)",
                        self.name,
                        self.address,
                        now - self.heard,
                        len(self.units.running()),
                    )
                    self.welcomed = False
                    self.heard = now
                    self._hello()
        return 0

    # ------------------------------------------------------------------------------------------- messages
    def _hello(self) -> None:
        assert self.sock is not None
        hello = Hello(
            PeerKind.MANAGER,
            self.name,
            socket.gethostname(),
            os.getpid(),
            int(self.settings.heartbeat_interval_seconds * 1000),
            capabilities=["payload=python", *self.settings.capabilities],
        )
        send_message(self.sock, hello)

    def _report(self) -> None:
        assert self.sock is not None
        s = self.settings
        ended, self.ended = self.ended, []
        report = ManagerReport(
            s.min_units,
            s.max_units,
            s.workers_per_unit,
            1,
            s.tier,
            int(s.idle_seconds * 1000),
            int(s.start_timeout_seconds * 1000),
            self.units.running(),
            [unit for unit, _ in ended],
            "; ".join(f"{unit}: {why}" for unit, why in ended),
        )
        send_message(self.sock, report)

    def _read(self) -> int | None:
        """Every message waiting; an exit code once the manager must stop."""
        assert self.sock is not None
        while True:
            try:
                message = recv_message(self.sock, zmq.NOBLOCK, ACCEPTED_BY_MANAGER)
            except zmq.Again:
                return None
            except ProtocolError as exc:
                logger.warning("worker manager %s: dropped a message from the scheduler: %s", self.name, exc)
                continue
            self.heard = time.monotonic()
            code = self._on_message(message)
            if code is not None:
                return code

    def _on_message(self, message: Message) -> int | None:
        if isinstance(message, Welcome):
            self.welcomed = True
            self.peer_timeout = max(message.peer_timeout_ms / 1000, 3 * self.settings.heartbeat_interval_seconds)
            logger.info("worker manager %s: connected to %s", self.name, message.scheduler_name or self.address)
            self._report()
        elif isinstance(message, ScaleUnits):
            if message.reason:
                logger.info("worker manager %s: the scheduler says: %s", self.name, message.reason)
            for unit in message.start:
                self.units.start(unit)
            for unit in message.stop:
                self.units.stop(unit)
        elif isinstance(message, Refused):
            logger.error("worker manager %s: the scheduler refused it: %s", self.name, message.reason)
            self._stop = f"refused: {message.reason}"
            return EXIT_REFUSED
        elif isinstance(message, Shutdown):
            self._stop = f"the scheduler shut down{': ' + message.reason if message.reason else ''}"
            return 0
        elif isinstance(message, Error):
            logger.warning("worker manager %s: the scheduler says: %s", self.name, message.message)
        elif not isinstance(message, HeartbeatEcho):
            logger.warning("worker manager %s: ignored %s", self.name, type(message).__name__)
        return None
