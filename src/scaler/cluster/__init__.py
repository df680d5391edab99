"""Local clusters: a scheduler and workers started together from Python."""

from scaler.about import require_python_310

require_python_310("Local clusters (scaler.cluster: Cluster, SchedulerClusterCombo)")
