# Seed 003 (the old "Scaled" README), "Graph Task": exactly as written, through the `scaled` compatibility
# package. Needs a scheduler with workers at tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one).
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# ruff: noqa: W291
# fmt: off
from scaled.client import Client


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

client = Client(address="tcp://127.0.0.1:2345")
futures = client.submit_graph(graph, keys=["e"])

print(futures[0].result())
