"""Thin I/O shells' shared pieces: ZeroMQ sockets set up in one place, event loops, process helpers."""
