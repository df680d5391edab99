"""The conformance kit: checks a scheduler, worker or client against docs/protocol.md, over raw ZeroMQ + Cap'n Proto.

    python -m scaler.conformance scheduler ADDRESS   # plays raw clients and raw workers against a running scheduler
    python -m scaler.conformance worker ADDRESS      # binds ADDRESS as a fake scheduler and checks one worker
    python -m scaler.conformance manager ADDRESS     # binds ADDRESS as a fake scheduler and checks one worker manager
    python -m scaler.conformance client ADDRESS      # binds ADDRESS as a fake scheduler, serves and checks one client

It uses nothing of scaler's own codec, client or worker: pyzmq, pycapnp loading the shipped `scaler.capnp`, and
`struct` (plus cloudpickle to build Python payloads for a `payload=python` worker). Importing this package does
nothing; see `scaler.conformance.cli` for the command line.
"""
