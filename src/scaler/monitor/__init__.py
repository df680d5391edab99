"""Monitors that read the scheduler's status socket: scaler_top (terminal)."""

from scaler.about import require_python_310

require_python_310("Scaler's monitors (scaler_top, scaler_ui)")
