"""A cluster that only authorized keys may use: keys made once, then every program given the same directory.

On several machines the directory's files are copied where they are needed (docs/security.md); here everything
runs on this machine. From a shell, the same is:

    scaler_keygen keys
    scaler_scheduler --keys keys tcp://127.0.0.1:2345
    scaler_cluster --keys keys -n 2 tcp://127.0.0.1:2345
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from scaler import Client, SchedulerClusterCombo
from scaler.errors import AuthenticationError


def fibonacci(clnt: Client, n: int):
    if n < 2:
        return n
    a = clnt.submit(fibonacci, clnt, n - 1)
    b = clnt.submit(fibonacci, clnt, n - 2)
    return a.result() + b.result()


def main():
    keys = Path(tempfile.mkdtemp()) / "keys"
    keygen = Path(sys.executable).parent / "scaler_keygen"
    subprocess.run([str(keygen), str(keys)], check=True)  # the scheduler's key pair, a client's and a worker's

    address = "tcp://127.0.0.1:2345"
    with SchedulerClusterCombo(address=address, n_workers=2, keys=keys, logging_level="WARNING"):
        with Client(address=address, keys=keys) as client:
            print(client.submit(pow, 2, 10).result())  # 1024
            # a client passed to a task reconnects from the worker with the same key
            print(client.submit(fibonacci, client, 8).result())  # 21

        try:
            Client(address=address, keys=False, timeout_seconds=10)  # no keys: refused at once
        except AuthenticationError as exc:
            print("without keys:", exc)


if __name__ == "__main__":
    main()
