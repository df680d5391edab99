"""ObjectReference: what send_object() returns; pass it as a task argument to use the object."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectReference:
    """An object sent once to the scheduler; tasks that get this as a top-level argument receive the object.

    References are not resolved inside containers: submit(f, ref) works, submit(f, [ref]) passes the reference.
    """

    name: str
    object_id: int
    size: int

    def __repr__(self) -> str:
        return f"ObjectReference({self.name!r}, id={self.object_id:#x}, {self.size} bytes)"
