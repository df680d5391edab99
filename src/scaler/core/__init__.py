"""Pure, synchronous state machines: events in, commands out.

Nothing under scaler.core may import asyncio, zmq, capnp, socket, threading or time, or read the clock:
time arrives inside events. tests/unit/test_core_purity.py enforces it.
"""
