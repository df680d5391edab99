"""Client disconnect and shutdown (docs: "Client Disconnect and Shutdown").

- client.clear() cancels the client's unfinished tasks and frees the objects it sent;
- client.disconnect() ends the client (the cluster keeps running for everyone else);
- client.shutdown() stops the scheduler and its workers, only when the scheduler is not protected.

Run it with: python examples/disconnect_client.py
"""

from scaler import Client, SchedulerClusterCombo
from scaler.errors import ClientClosedError, ProtectedModeError


def main():
    address = "tcp://127.0.0.1:2345"

    # protected=False lets a client stop the cluster; by default the scheduler runs in protected mode
    cluster = SchedulerClusterCombo(address=address, n_workers=2, protected=False)

    client = Client(address=address)
    ref = client.send_object(list(range(10)), name="numbers")
    print(client.submit(sum, ref).result())  # 45

    # Client.clear: all unfinished tasks of this client are cancelled and its object references are
    # invalidated; the client itself stays usable and can submit new tasks.
    client.clear()
    print(client.submit(pow, 2, 10).result())  # 1024

    # Client.disconnect: this client cannot be used any more; create another Client to submit more work.
    # The scheduler and workers are not affected.
    client.disconnect()
    try:
        client.submit(pow, 2, 10)
    except ClientClosedError as exc:
        print(f"disconnected client: {exc}")

    # Client.shutdown: stops the scheduler and its workers. Only allowed when the scheduler is not protected.
    other = Client(address=address)
    other.shutdown()
    print("cluster stopped by client.shutdown()")

    cluster.shutdown()  # nothing left to stop; safe to call anyway

    # With a protected scheduler (the default), shutdown is refused.
    protected_cluster = SchedulerClusterCombo(address=address, n_workers=1)
    with Client(address=address) as client:
        try:
            client.shutdown()
        except ProtectedModeError as exc:
            print(f"protected scheduler: {exc}")
    protected_cluster.shutdown()


if __name__ == "__main__":
    main()
