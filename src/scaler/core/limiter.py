"""LogLimiter: lets through the first few log lines of each kind per peer in a window of time, counts the rest, and
sums them up in one line per kind when the window ends. A peer that floods the scheduler with bad messages costs a
handful of lines every window, not one line per message; memory stays bounded however many peers there are.

peer_label says who a peer is in a log line without its routing id's secret part: the core and the limiter's summary
name peers only through it.

Pure: time arrives as an argument; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

WINDOW_SECONDS = 10.0
BURST = 10  # events of one kind from one peer let through per window
MAX_ID_LABEL = 100  # characters of a routing id's kind|host|pid shown at most


def peer_label(peer: Hashable, session: str = "") -> str:
    """Who `peer` is, for a log line, never with its routing id's secret. Routing ids are secrets (with one, a peer
    could take over another's route: docs/security.md): a routing id in the form Scaler's peers use,
    `kind|host|pid|<random>`, shows as `kind|host|pid` only (cut, and unprintable characters replaced, since the
    peer chose them); one in any other form is not shown at all. `session`, when the peer has one (`client alice`),
    comes first. A peer that is not a routing id (an address, a kind of event) shows as its repr."""
    if not isinstance(peer, bytes):
        return session or repr(peer)
    fields = peer.split(b"|", 3)
    if len(fields) == 4:
        text = b"|".join(fields[:3]).decode("utf-8", "replace")
        shown = "".join(c if c.isprintable() else "?" for c in text[:MAX_ID_LABEL])
        return f"{session} ({shown})" if session else f"peer {shown}"
    return session or "a peer whose routing id is not shown"


class LogLimiter:
    """`allow(now, kind, peer)` says whether to log (and answer) one more event of `kind` from `peer`: yes for its
    first `burst` events in each window of `window_seconds`; the rest are counted. `summary(now)` ends a window that
    has run its time and returns a line per kind that had events suppressed. At most `max_peers` peers are tracked
    per window: events from peers beyond that are counted together and never let through until the window ends."""

    def __init__(self, window_seconds: float = WINDOW_SECONDS, burst: int = BURST, max_peers: int = 1000) -> None:
        self.window = window_seconds
        self.burst = burst
        self.max_peers = max_peers
        self._started: float | None = None
        self._seen: dict[tuple[str, Hashable], int] = {}
        self._suppressed: dict[str, dict[Hashable, int]] = {}
        self._overflow: dict[str, int] = {}
        self.total_suppressed = 0

    def allow(self, now: float, kind: str, peer: Hashable) -> bool:
        if self._started is None:
            self._started = now
        key = (kind, peer)
        count = self._seen.get(key)
        if count is None:
            if len(self._seen) >= self.max_peers:
                self._overflow[kind] = self._overflow.get(kind, 0) + 1
                self.total_suppressed += 1
                return False
            count = 0
        self._seen[key] = count + 1
        if count < self.burst:
            return True
        by_peer = self._suppressed.setdefault(kind, {})
        by_peer[peer] = by_peer.get(peer, 0) + 1
        self.total_suppressed += 1
        return False

    def summary(self, now: float, label: Callable[[Any], str] = peer_label) -> list[str]:
        """Lines summing up what was suppressed, once the current window is over (then a new one starts); [] before
        that, or when nothing was suppressed. The peers that sent the most are named by `label`."""
        if self._started is None or now - self._started < self.window:
            return []
        lines = []
        for kind in sorted(set(self._suppressed) | set(self._overflow)):
            by_peer = self._suppressed.get(kind, {})
            overflow = self._overflow.get(kind, 0)
            total = sum(by_peer.values()) + overflow
            top = sorted(by_peer.items(), key=lambda item: -item[1])[:3]
            worst = ", ".join(f"{label(peer)}: {count:,}" for peer, count in top)
            peers = f"{len(by_peer):,} peers" + (f" and others beyond the first {self.max_peers:,}" if overflow else "")
            lines.append(
                f"{total:,} more '{kind}' events in the last {now - self._started:.0f}s were not logged ({peers}"
                + (f"; most from {worst}" if worst else "")
                + ")"
            )
        self._started = None
        self._seen.clear()
        self._suppressed.clear()
        self._overflow.clear()
        return lines
