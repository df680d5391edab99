"""Client.map: run one function over many sets of arguments, in parallel (docs: Quickstart, "Client.map").

A SchedulerClusterCombo starts a scheduler and some workers on this machine; the client connects to the
scheduler's address and maps math.sqrt over 100 argument tuples. Run it with: python examples/map_client.py
"""

import math

from scaler import Client, SchedulerClusterCombo


def main():
    address = "tcp://127.0.0.1:2345"

    # a scheduler listening on `address`, and 4 workers connected to it, all on this machine
    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    with Client(address=address) as client:
        # map() takes an iterable of argument tuples, one tuple per task: math.sqrt(0), math.sqrt(1), ...
        results = client.map(math.sqrt, [(i,) for i in range(0, 100)])

        # the results come back in the order of the arguments
        print(sum(results))  # 661.46...

    cluster.shutdown()


if __name__ == "__main__":
    main()
