"""Task output: what tasks print, printed by the client, each line prefixed with its task (docs/client.md)."""

import sys
import time

from scaler import Client, SchedulerClusterCombo


def square(x: int) -> int:
    print(f"squaring {x}")
    print(f"{x} is odd" if x % 2 else f"{x} is even", file=sys.stderr)
    return x * x


def count_down(n: int) -> str:
    for i in range(n, 0, -1):
        print(f"{i}...", flush=True)  # each line reaches the client within about 0.2 s, while the task runs
        time.sleep(0.3)
    return "lift-off"


if __name__ == "__main__":
    with SchedulerClusterCombo(n_workers=2, logging_level="ERROR") as cluster:
        with Client(address=cluster.address, stream_output=True) as client:
            print(client.submit(square, 3).result())
            # (square task 0x...) squaring 3
            # (square task 0x...) 3 is odd          <- on stderr
            # 9
            print(client.map(square, [(4,), (5,)]))  # their lines, then [16, 25]
            print(client.submit(count_down, 3).result())  # 3... 2... 1... as they come, then lift-off

        with Client(address=cluster.address) as client:  # stream_output=False, the default
            print(client.submit(square, 6).result())  # 36; the task's lines go to the worker's own output
            print(client.options(stream_output=True).submit(square, 7).result())  # this task's lines, then 49
