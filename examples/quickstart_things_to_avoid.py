# Seed 002 (Quickstart), "Things to Avoid": what NOT to do, submitting a heavy function once per task.
# As written except one number: the document builds b"1" * 5_000_000_000 (a 5 GB bytes object, serialized
# again for every one of the 100 submits, i.e. ~500 GB of serialization); that does not fit this machine or
# a test run, so this copy uses 5_000_000 (5 MB). The point it makes is unchanged: use client.map (or
# client.send_object) instead of submitting a heavy function over and over.
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# ruff: noqa: I001
# fmt: off
import functools
import random

from scaler import Client, SchedulerClusterCombo

def lookup(heavy_map: bytes, index: int):
    return index * 1


def main():
    address = "tcp://127.0.0.1:2345"

    cluster = SchedulerClusterCombo(address=address, n_workers=3)

    # a heavy function that is expensive to serialize
    big_func = functools.partial(lookup, b"1" * 5_000_000)  # the document has 5_000_000_000 (5 GB)

    arguments = [random.randint(0, 100) for _ in range(100)]

    with Client(address=address) as client:
        # we incur serialization overhead for every call to client.submit -- use client.map instead
        futures = [client.submit(big_func, i) for i in arguments]
        print([fut.result() for fut in futures])

    cluster.shutdown()


if __name__ == "__main__":
    main()
