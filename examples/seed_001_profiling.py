# Seed 001 (Additional Features), "Task Profiling": exactly as written. Needs a scheduler with workers at
# tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one and substitutes its port).
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# ruff: noqa: I001, B018
# fmt: off
from scaler import Client

def calculate(sec: int):
    return sec * 1

client = Client(address="tcp://127.0.0.1:2345")
fut = client.submit(calculate, 1, profiling=True)

# this will execute the task
fut.result()

# contains task run duration time in microseconds
fut.profiling_info().duration_us

# contains the peak memory usage in bytes for the task, this memory peak is sampled every second
fut.profiling_info().peak_memory
