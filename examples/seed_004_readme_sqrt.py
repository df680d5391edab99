# Seed 004 (README), the opening example: exactly as written. Needs a scheduler with workers at
# tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one and substitutes its port).
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# ruff: noqa: I001
# fmt: off
import math
from scaler import Client

with Client(address="tcp://127.0.0.1:2345") as client:
    # Submits 100 tasks
    futures = [
        client.submit(math.sqrt, i)
        for i in range(0, 100)
    ]

    # Collects the results and sums them
    result = sum(future.result() for future in futures)

    print(result)  # 661.46
