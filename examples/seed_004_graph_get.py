# Seed 004 (README), "Graph computations": exactly as written. Needs a scheduler with workers at
# tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one and substitutes its port).
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# fmt: off
from scaler import Client


def inc(i):
    return i + 1


def add(a, b):
    return a + b


def minus(a, b):
    return a - b


graph = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),  # c = a + 1 = 2 + 1 = 3
    "d": (add, "a", "b"),  # d = a + b = 2 + 2 = 4
    "e": (minus, "d", "c")  # e = d - c = 4 - 3 = 1
}

with Client(address="tcp://127.0.0.1:2345") as client:
    result = client.get(graph, keys=["e"])
    print(result)  # {"e": 1}
