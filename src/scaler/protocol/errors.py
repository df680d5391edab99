"""The one exception the protocol layer raises: a message that cannot be accepted as it is."""

from __future__ import annotations


class ProtocolError(ValueError):
    """A received message is malformed (bad header, wrong column length, missing payload frames...)."""


class UnexpectedMessage(ProtocolError):
    """A well-formed message of a kind the receiver never accepts (a client sending dispatchTasks...)."""
