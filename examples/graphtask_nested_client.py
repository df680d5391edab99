"""Dynamically building a graph within a task: when the graph is only known at run time, a task can build it
and submit it itself, through a Client passed as an argument (docs: "Dynamically Building Graph Within a
Task"). Run it with: python examples/graphtask_nested_client.py
"""

from scaler import Client, SchedulerClusterCombo


def minus(a, b):
    return a - b


def fibonacci(clnt: Client, n: int):
    if n == 0:
        return 0
    elif n == 1:
        return 1
    else:
        # Build a small graph on the worker side and compute it: n - 1 and n - 2.
        # This shows what graphs can do; most programs are clearer with plain nested submits.
        fib_graph = {
            "n": n,
            "one": 1,
            "two": 2,
            "n_minus_one": (minus, "n", "one"),
            "n_minus_two": (minus, "n", "two"),
        }
        res = clnt.get(fib_graph, keys=["n_minus_one", "n_minus_two"])

        # then recurse with ordinary nested tasks
        a = clnt.submit(fibonacci, clnt, res["n_minus_one"])
        b = clnt.submit(fibonacci, clnt, res["n_minus_two"])
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
