"""Thin I/O shells' shared pieces: ZeroMQ sockets set up in one place, event loops, process helpers. (Importing one of
scaler 1.9.9's scaler.io modules this version lacks says where it went: scaler.compat.moved.)"""

from scaler.compat import moved as _moved

_moved.install()
