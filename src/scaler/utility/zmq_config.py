"""scaler 1.9.9's scaler.utility.zmq_config (see scaler.utility): ZMQConfig is an address string here, so it goes
wherever an address does (Client, SchedulerClusterCombo, Cluster)."""

from __future__ import annotations

import enum

from scaler.io.addresses import parse_address


class ZMQType(enum.Enum):
    inproc = "inproc"
    ipc = "ipc"
    tcp = "tcp"


class ZMQConfig(str):
    """An address, tcp://HOST:PORT or ipc://PATH, checked when made."""

    def __new__(cls, address: str) -> ZMQConfig:
        parse_address(address)
        return super().__new__(cls, address)

    @staticmethod
    def from_string(address: str) -> ZMQConfig:
        return ZMQConfig(address)

    def to_address(self) -> str:
        return str(self)

    @property
    def type(self) -> ZMQType:
        return ZMQType(self.split("://", 1)[0])

    @property
    def host(self) -> str | None:
        return self.split("://", 1)[1].rsplit(":", 1)[0] if self.type == ZMQType.tcp else None

    @property
    def port(self) -> int | None:
        return int(self.rsplit(":", 1)[1]) if self.type == ZMQType.tcp else None
