"""The worker agent's pure core and its processor messages."""

from scaler.about import require_python_310

require_python_310("Scaler's workers (scaler_cluster, scaler_worker)")
