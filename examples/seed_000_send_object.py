# Seed 000 (Additional Features), "Send Object": exactly as written. It uses the old argument order
# send_object(name, obj), which Scaler still accepts with a DeprecationWarning (today: send_object(obj, name=...)).
# Needs a scheduler with workers at tcp://127.0.0.1:2345 (tests/e2e/test_examples.py starts one).
# The code below is kept as the document prints it: not reformatted, lint rules relaxed for it.
# ruff: noqa: I001
# fmt: off
from scaler import Client

def add(a, b):
    return a + b

client = Client(address="tcp://127.0.0.1:2345")
ref = client.send_object("large_object", [1, 2, 3, 4, 5])

fut = client.submit(add, ref, [6])
assert fut.result() == [1, 2, 3, 4, 5, 6]

# this will not work, scaler doesn't do deep resolving
# fut = client.submit(add, [ref], [6])
