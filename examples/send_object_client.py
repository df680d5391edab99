"""send_object: send a (large) object to the scheduler once, then pass its reference to many tasks
(docs: Additional Features, "Send Object"). Run it with: python examples/send_object_client.py
"""

from scaler import Client, SchedulerClusterCombo


def add(a, b):
    return a + b


def main():
    address = "tcp://127.0.0.1:2345"
    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    with Client(address=address) as client:
        large_object = [1, 2, 3, 4, 5]

        # the object travels to the scheduler once; `ref` is a small reference to it
        ref = client.send_object(large_object, name="large_object")

        # a task that gets the reference as a positional argument receives the object itself
        fut = client.submit(add, ref, [6])
        print(fut.result())  # [1, 2, 3, 4, 5, 6]
        assert fut.result() == [1, 2, 3, 4, 5, 6]

        # the reference can be used by as many tasks as needed, without sending the object again
        futures = [client.submit(add, ref, [i]) for i in range(3)]
        print([f.result()[-1] for f in futures])  # [0, 1, 2]

        # this will not work: references are not resolved inside containers (no deep resolving),
        # the task would get a list holding the reference, not the object
        # fut = client.submit(add, [ref], [6])

    cluster.shutdown()


if __name__ == "__main__":
    main()
