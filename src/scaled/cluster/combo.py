"""Compatibility name: scaled.cluster.combo.SchedulerClusterCombo is scaler.SchedulerClusterCombo."""

from scaler import SchedulerClusterCombo

__all__ = ["SchedulerClusterCombo"]
