"""Graph submission: tasks that depend on other tasks' results, submitted together as a dask-style graph
(docs: Additional Features, "Graph Submission"). Run it with: python examples/graphtask_client.py
"""

from scaler import Client, SchedulerClusterCombo


def inc(i):
    return i + 1


def add(a, b):
    return a + b


def minus(a, b):
    return a - b


# A graph maps keys to values: a literal, or a task tuple (function, argument, ...) where an argument that is
# a key of the graph stands for that key's value.
graph = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),  # c = a + 1 = 2 + 1 = 3
    "d": (add, "a", "b"),  # d = a + b = 2 + 2 = 4
    "e": (minus, "d", "c"),  # e = d - c = 4 - 3 = 1
}


def main():
    address = "tcp://127.0.0.1:2345"
    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    with Client(address=address) as client:
        # get() computes the graph and returns {key: value} for the keys asked for
        result = client.get(graph, keys=["e"])
        print(result)  # {'e': 1}

        # submit_graph() returns one future per key asked for, in order
        futures = client.submit_graph(graph, keys=["c", "d", "e"])
        print([future.result() for future in futures])  # [3, 4, 1]

    cluster.shutdown()


if __name__ == "__main__":
    main()
