"""Whether a hello opens a session: the checks of a peer's hello, as one pure function.

The core asks `refusal(...)` before it opens a session; an answer says why not, whether the peer's key is the problem
(Refused.keyProblem) and whether it counts among the peers refused for their key (Status.refusedPeers). No state is
changed here. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from scaler.protocol.capabilities import MAX_OFFERED, capabilities_problem
from scaler.protocol.records import PROTOCOL_VERSION, Hello, PeerKind

if TYPE_CHECKING:
    from scaler.core.scheduler.events import PeerKey
    from scaler.core.scheduler.names import WorkerNames

PEER_KIND_NAMES = {PeerKind.CLIENT: "client", PeerKind.WORKER: "worker", PeerKind.MANAGER: "worker manager"}
# The refusal of a worker hello whose name is bound to another key.
NAME_TAKEN = (
    "the worker name {name!r} belongs to another key; choose another name (scaler_cluster --worker-name-prefix, or "
    "Cluster(worker_names=...))"
)


class Refusal(NamedTuple):
    reason: str
    key_problem: bool = False  # the peer's key is the problem (Refused.keyProblem)
    counted: bool = False  # counts among the peers refused for their key (Status.refusedPeers)


def refusal(
    hello: Hello, key: PeerKey | None, session: tuple[bytes | None] | None, names: WorkerNames
) -> Refusal | None:
    """Why this hello opens no session; None if it does. `key`: the key its connection authenticated with (None
    without keys); `session`: (the key of the session the peer's routing id has now,) or None if it has none; `names`:
    the remembered worker names. A worker name is bound to the key it first joined with for as long as the scheduler
    remembers it: a hello with it from another key is refused, so that it can neither add losses to the name nor hold
    its worker back (counted, as hellos refused for their key are). Without keys every key is None: never refused."""
    if hello.protocol_version != PROTOCOL_VERSION:
        return Refusal(
            f"protocol version {hello.protocol_version} is not supported; this scheduler speaks {PROTOCOL_VERSION}"
        )
    kind = PEER_KIND_NAMES.get(hello.kind)
    if kind is None:
        return Refusal("a monitor says hello on the scheduler's monitor address (it logs it at start), not on this one")
    if key is not None and key.role != hello.kind:
        role = PEER_KIND_NAMES[key.role]
        reason = (
            f"the key {key.name!r} is authorized for {role}s only, and a {role} key cannot be used as a {kind}: "
            f"give this {kind} a {kind} key (scaler_keygen makes them)"
        )
        return Refusal(reason, key_problem=True, counted=True)
    public = key.public if key is not None else None
    if session is not None and session[0] != public:
        return Refusal(
            "this connection's routing id belongs to a session of another key", key_problem=True, counted=True
        )
    if hello.kind != PeerKind.WORKER:
        return None
    if hello.queue_capacity < 1:
        return Refusal("a worker must accept at least one task (queueCapacity >= 1)")
    problem = capabilities_problem(hello.capabilities, MAX_OFFERED, "the worker's capabilities")
    if problem is not None:
        return Refusal(problem)
    if names.taken(hello.name, public):
        return Refusal(NAME_TAKEN.format(name=hello.name), counted=True)
    return None
