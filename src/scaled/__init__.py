"""Compatibility names for programs written for Scaler's predecessor, "Scaled" (seed document 003).

`from scaled.client import Client` and `from scaled.cluster.combo import SchedulerClusterCombo` give the very
same classes as `from scaler import Client, SchedulerClusterCombo`. New code should import `scaler`.
"""

from scaler import Client, SchedulerClusterCombo, Serializer, __version__

__all__ = ["Client", "SchedulerClusterCombo", "Serializer", "__version__"]
