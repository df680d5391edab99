# Seed 003 (the old "Scaled" README), "Start scheduler and cluster independently": the client, exactly as
# written, through the `scaled` compatibility package. Needs a scheduler with workers at tcp://127.0.0.1:2345
# (tests/e2e/test_examples.py starts one and substitutes its port).
from scaled.client import Client


def foobar(foo: int):
    return foo


client = Client(address="tcp://127.0.0.1:2345")
future = client.submit(foobar, 1)

print(future.result())
