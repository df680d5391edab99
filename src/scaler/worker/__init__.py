"""The worker: an agent process (scaler.worker.agent) and its processor processes (scaler.worker.processor)."""

from scaler.about import require_python_310

require_python_310("Scaler's workers (scaler_cluster, scaler_worker)")
