"""Monitors that read the scheduler's status socket: scaler_top (terminal)."""
