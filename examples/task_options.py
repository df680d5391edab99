"""Task options: a timeout, retries and a priority per task, and a memory limit per processor (docs/client.md)."""

import time

from scaler import Client, SchedulerClusterCombo
from scaler.errors import TaskMemoryError, TaskTimeoutError


def slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def flaky(path: str) -> str:
    """Fails on its first run, succeeds on the next (it counts its runs in a file)."""
    with open(path, "a+") as f:
        f.seek(0)
        runs = len(f.read()) + 1
        f.write("x")
    if runs == 1:
        raise ConnectionResetError("the first try fails")
    return f"succeeded on run {runs}"


def hog(megabytes: int) -> int:
    block = bytearray(megabytes << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(10)
    return len(block)


if __name__ == "__main__":
    import tempfile

    with SchedulerClusterCombo(
        address="tcp://127.0.0.1:2351", n_workers=2, memory_limit="256M", logging_level="ERROR"
    ) as cluster:
        with Client(address=cluster.address) as client:
            patient = client.options(timeout=2, retries=1)
            print(patient)  # <Client tcp://127.0.0.1:2351 with timeout=2s retries=1 priority=0>
            try:
                client.options(timeout=1).submit(slow, 60).result()
            except TaskTimeoutError as exc:
                print("timed out:", exc)
            with tempfile.NamedTemporaryFile() as counter:
                print(client.options(retries=2).submit(flaky, counter.name).result())
            print(client.options(priority=10).map(slow, [(0.1,), (0.2,)]))  # [0.1, 0.2]
            try:
                client.submit(hog, 512).result()
            except TaskMemoryError as exc:
                print("over memory:", exc)
