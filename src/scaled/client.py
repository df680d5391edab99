"""Compatibility name: scaled.client.Client is scaler.Client."""

from scaler import Client

__all__ = ["Client"]
