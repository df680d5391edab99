"""Client.submit: run one function call on a worker and get a standard future back (docs: "Client.submit").

The result is fetched lazily: future.result() waits for the task and decodes its value.
Run it with: python examples/simple_client.py
"""

import math

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def main():
    address = "tcp://127.0.0.1:2345"
    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    with Client(address=address) as client:
        # one task: submit() returns a concurrent.futures.Future subclass at once
        future = client.submit(calculate, 1)
        print(future.result())  # 1

        # many tasks: submit each, then collect the results
        futures = [client.submit(math.sqrt, i) for i in range(0, 100)]
        print(sum(future.result() for future in futures))  # 661.46...

    cluster.shutdown()


if __name__ == "__main__":
    main()
