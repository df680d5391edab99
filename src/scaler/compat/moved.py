"""Where scaler 1.9.9's internal modules went (issue 29): importing one that this version does not have raises a
ModuleNotFoundError saying so and what to use, instead of a bare "No module named". Installed by scaler.utility (and
scaler.io) as a finder tried after every other one, for those two packages' names only."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (importlib.abc pulls in importlib.resources: ~9 ms at every scaler process's start for nothing)
    import importlib.machinery
    from collections.abc import Sequence
    from types import ModuleType

_INSTEAD = {
    "scaler.utility.graph": "graphs are scaler.Client.get / submit_graph (docs/client.md)",
    "scaler.utility.metadata": "a future's profiling is future.profiling_info() (scaler.ProfilingInfo)",
    "scaler.utility.queues": "no queues of the scheduler are public here",
    "scaler.utility.event_loop": "the commands take --event-loop builtin|uvloop",
    "scaler.io.async_binder": "peers speak the protocol of docs/protocol.md over ZeroMQ",
    "scaler.io.async_connector": "peers speak the protocol of docs/protocol.md over ZeroMQ",
    "scaler.io.sync_connector": "peers speak the protocol of docs/protocol.md over ZeroMQ",
    "scaler.io.sync_subscriber": "monitors read the status socket: scaler_top, scaler_ui, docs/monitoring.md",
}
_PACKAGES = ("scaler.utility.", "scaler.io.")


class _Moved:
    """A meta path finder (the protocol: find_spec), raising for 1.9.9's module names no other finder found."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PACKAGES):
            return None
        instead = next(
            (text for name, text in _INSTEAD.items() if fullname == name or fullname.startswith(name + ".")), ""
        )
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: it was an internal module of scaler 1.9.9, which this Scaler does not "
            f"have{': ' + instead if instead else ''}. The public API is scaler's (Client, SchedulerClusterCombo, "
            "...) and scaler.errors; scaler.utility keeps network_util, logging, exceptions and zmq_config",
            name=fullname,
        )


_finder = _Moved()


def install() -> None:
    """Add the finder last in sys.meta_path (once): it sees only names no other finder found."""
    if _finder not in sys.meta_path:
        sys.meta_path.append(_finder)
