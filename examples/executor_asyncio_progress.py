"""client.get_executor(), `await future` and scaler.progress() on a cluster of its own (docs/client.md)."""

import asyncio
import concurrent.futures
import time

import scaler
from scaler import Client, SchedulerClusterCombo


def slow_square(x: int) -> int:
    time.sleep(0.05)
    return x * x


def total_of_squares(executor: concurrent.futures.Executor, n: int) -> int:
    """Written for any concurrent.futures.Executor: a ProcessPoolExecutor runs it just as well."""
    return sum(executor.map(slow_square, range(n), chunksize=5))


async def squares_awaited(client: Client) -> list[int]:
    one = await client.submit(slow_square, 12)
    many = await asyncio.gather(*(client.submit(slow_square, i) for i in range(5)))
    return [one, *many]


if __name__ == "__main__":
    with SchedulerClusterCombo(address="tcp://127.0.0.1:2352", n_workers=2, logging_level="WARNING") as cluster:
        with Client(address=cluster.address) as client:
            print(list(client.get_executor().map(pow, [2, 3], [5, 2])))  # [32, 9]
            with client.get_executor() as executor:  # was: concurrent.futures.ProcessPoolExecutor()
                print("total:", total_of_squares(executor, 20))  # total: 2470
            print("awaited:", asyncio.run(squares_awaited(client)))  # awaited: [144, 0, 1, 4, 9, 16]
            futures = [client.submit(slow_square, i) for i in range(20)]
            done, not_done = scaler.progress(futures, description="squares")  # a bar on stderr
            print("done:", len(done), "not done:", len(not_done))  # done: 20 not done: 0
            print("map:", client.map(slow_square, [(i,) for i in range(8)], progress=True))
