"""scaler.joblib: the import path the documents show for the joblib backend, which lives in scaler.integrations.joblib.

from scaler.joblib import register_scaler
"""

from scaler.integrations.joblib import ScalerBackend, register_scaler

__all__ = ["ScalerBackend", "register_scaler"]
