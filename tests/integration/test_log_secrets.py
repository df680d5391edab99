"""A real scheduler never writes a routing id's secret part to its log (docs/security.md: routing ids are never
published; with one, a peer could take over another's route). Raw peers with routing ids of our making send it
garbage, bad requests, payloads over the limit and a message for another key's session; its log (captured stderr,
at INFO) names them, and holds none of the secrets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scaler.core.limiter import BURST
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    Error,
    Heartbeat,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    Welcome,
)
from tests.integration.keyed_scheduler import RawPeer, keyed_scheduler, routing_id

pytestmark = pytest.mark.timeout(120)
GARBAGE = b"\x00not a Cap'n Proto message"


def test_the_scheduler_log_names_peers_without_their_routing_ids(tmp_path: Path) -> None:
    with keyed_scheduler(tmp_path, "--max-payload-bytes", "1000") as scheduler:
        client_keys, worker_keys = scheduler.peer_keys("", "client"), scheduler.peer_keys("", "worker")
        client_id, client_secret = routing_id("C", "log-test", 111)
        worker_id, worker_secret = routing_id("W", "log-test", 222)
        stranger_id, stranger_secret = routing_id("C", "stranger", 333)
        secrets = [client_secret, worker_secret, stranger_secret]
        with (
            RawPeer(scheduler.address, client_id, client_keys) as client,
            RawPeer(scheduler.address, worker_id, worker_keys) as worker,
            RawPeer(scheduler.address, stranger_id, client_keys) as stranger,
        ):
            client.send(Hello(PeerKind.CLIENT, "log-client", "log-test", 111))
            prefix = client.receive(Welcome).id_prefix
            worker.send(Hello(PeerKind.WORKER, "log-worker", "log-test", 222, queue_capacity=1))
            worker.receive(Welcome)
            for _ in range(BURST + 5):  # garbage past the burst: logged, then summed up
                client.send_raw(GARBAGE)
                stranger.send_raw(GARBAGE)
            client.send(PutObjects([((prefix + 1) << ID_PREFIX_SHIFT) | 1], [b"f"]))  # not its prefix
            client.send(PutObjects([(prefix << ID_PREFIX_SHIFT) | 2], [b"x" * 2000]))  # over the limit
            worker.send(SubmitTasks([], [], b"", [], [], None, []))  # a worker may not submit
            worker.receive(Error)
            scheduler.wait_for_log("refused objects from")  # the client's last message was read before the takeover
            # a connection with the worker key takes over the client's route (it knows its id) and sends for it
            with RawPeer(scheduler.address, client_id, worker_keys) as intruder:
                intruder.send(Heartbeat())
                scheduler.wait_for_log("not the key of that session")
            text = scheduler.wait_for_log("more 'malformed message' events")  # the summary, once its window ends
        leaks = [line for line in text.splitlines() if any(secret in line for secret in secrets)]
        assert leaks == []
        assert "b'C|" not in text and "b'W|" not in text, text[-5000:]
        assert "dropped a message from client log-client (C|log-test|111): " in text, text[-5000:]
        assert "dropped a message from peer C|stranger|333: " in text, text[-5000:]
        assert "refused a request from client log-client (C|log-test|111): 1 object ids" in text, text[-5000:]
        assert "refused objects from client log-client (C|log-test|111): 1 objects carry" in text, text[-5000:]
        assert "refused a request from worker log-worker (W|log-test|222): a worker may not send" in text
        assert "dropped a message for client log-client (C|log-test|111): it came with <PeerKey worker" in text
