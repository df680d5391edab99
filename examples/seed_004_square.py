# Seed 004 (README), "Submitting Python tasks using the Scaler client": exactly as written. Needs a scheduler
# with workers at tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one and substitutes its port).
from scaler import Client


def square(value: int):
    return value * value


with Client(address="tcp://127.0.0.1:2345") as client:
    future = client.submit(square, 4)
    print(future.result())  # 16
