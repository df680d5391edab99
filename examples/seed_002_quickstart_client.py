# Seed 002 (Quickstart), "Spinning up Scheduler and Cluster Separately": the client snippet, corrected.
# As printed in the document it does not run: the closing parenthesis of client.map( is missing, and
# `calculate` and `tasks` are not defined. This copy defines them (as the other examples do) and closes the
# parenthesis; the rest is as written. Needs `scaler_scheduler tcp://127.0.0.1:8516` and
# `scaler_worker -n 10 tcp://127.0.0.1:8516` running (tests/e2e/test_examples.py starts a cluster instead).
import random

from scaler import Client


def calculate(sec: int):
    return sec * 1


tasks = [random.randint(0, 100) for _ in range(100)]

address = "tcp://127.0.0.1:8516"
with Client(address=address) as client:
    results = client.map(calculate, [(i,) for i in tasks])
    assert results == tasks
    print(f"{len(results)} results match")
