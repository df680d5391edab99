"""With keys, a worker's name belongs to the key it joined with (the red team's finding: a peer holding any worker key
said hello with a real worker's name and dropped, six times, and the name, and the real worker with it, was held
back 80 s). A real keyed scheduler, a real worker with key alpha, and a raw peer with key beta that says hello under
the real worker's name and drops, six times: refused each time with the reason; the real worker keeps working.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scaler import Client
from scaler.protocol.messages import Hello, PeerKind, Refused
from tests.integration.keyed_scheduler import RawPeer, keyed_scheduler, program, routing_id, start, stop

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 20


def test_a_worker_key_cannot_take_another_workers_name_and_hold_it_back(tmp_path: Path) -> None:
    with keyed_scheduler(tmp_path, workers=("alpha", "beta")) as scheduler:
        cluster_log = tmp_path / "cluster.log"
        cluster = start(
            [
                program("scaler_cluster"),
                "--keys",
                str(scheduler.keys / "alpha"),
                "-n",
                "1",
                "--worker-name-prefix",
                "alpha",
                scheduler.address,
            ],
            cluster_log,
        )
        try:
            log = scheduler.wait_for_log("(key alpha) joined")
            match = re.search(r"worker (alpha-\d+-0) \(key alpha\) joined", log)
            assert match is not None, log[-3000:]
            name = match.group(1)
            taken = (
                f"the worker name {name!r} belongs to another key; choose another name "
                "(scaler_cluster --worker-name-prefix, or Cluster(worker_names=...))"
            )
            beta = scheduler.peer_keys("beta", "worker")
            for attempt in range(6):
                identity, _ = routing_id("W", "intruder", 1000 + attempt)
                with RawPeer(scheduler.address, identity, beta) as intruder:
                    intruder.send(Hello(PeerKind.WORKER, name, "intruder", 1000 + attempt, queue_capacity=1))
                    refused = intruder.receive(Refused)
                    assert refused.reason == taken, refused
                    assert not refused.key_problem
                # leaving the block drops the connection, as a crashing worker does
            with Client(scheduler.address, keys=scheduler.keys, timeout_seconds=TIMEOUT) as client:
                # alpha is the only worker: held back (80 s after six losses, before the fix), nothing would run
                assert client.map(pow, [(i, 2) for i in range(20)], timeout=TIMEOUT) == [i * i for i in range(20)]
            text = scheduler.text()
            assert text.count(f"refused worker {name!r} (key beta): {taken}") == 6, text[-3000:]
            assert "was lost" not in text and "held back" not in text, text[-3000:]
            assert cluster.poll() is None, cluster_log.read_text()[-3000:]  # the real worker never stopped
        finally:
            stop(cluster)
