"""Nested tasks: a task can submit tasks itself, recursively, through a Client passed as an argument
(docs: "Nested Tasks"). Waiting on its children never deadlocks the workers, however deep the recursion.
Run it with: python examples/nested_client.py
"""

from scaler import Client, SchedulerClusterCombo


def fibonacci(clnt: Client, n: int):
    if n == 0:
        return 0
    elif n == 1:
        return 1
    else:
        # `clnt` arrived in the worker as a client connected to the same scheduler
        a = clnt.submit(fibonacci, clnt, n - 1)
        b = clnt.submit(fibonacci, clnt, n - 2)
        return a.result() + b.result()


def main():
    address = "tcp://127.0.0.1:2345"
    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    with Client(address=address) as client:
        result = client.submit(fibonacci, client, 8).result()
        print(result)  # 21

    cluster.shutdown()


if __name__ == "__main__":
    main()
