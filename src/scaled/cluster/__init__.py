"""Compatibility names for scaler.cluster."""
