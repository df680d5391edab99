"""Command-line programs: scaler_scheduler, scaler_cluster (alias scaler_worker)."""
