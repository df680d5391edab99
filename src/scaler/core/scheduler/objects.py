"""Objects held by the scheduler: client objects (functions, send_object, graph literals) and task results
other tasks still need. Reference-counted by unfinished tasks; freed when released and unreferenced.
Pure; no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.protocol.records import Payload

if TYPE_CHECKING:
    from scaler.core.scheduler.sessions import ClientSession


class StoredObject:
    __slots__ = ("holders", "name", "object_id", "owner", "payload", "refs", "released")

    def __init__(self, object_id: int, owner: ClientSession, payload: Payload, name: str, released: bool) -> None:
        self.object_id = object_id
        self.owner = owner
        self.payload = payload
        self.name = name
        self.refs = 0  # unfinished tasks that need it
        self.released = released  # its owner no longer needs it: drop it once refs reaches 0
        self.holders: set[bytes] = set()  # identities of workers that were sent it

    @property
    def droppable(self) -> bool:
        return self.released and self.refs <= 0

    def __repr__(self) -> str:
        return f"<Object {self.object_id:#x} {len(self.payload)}B refs={self.refs} released={self.released}>"
