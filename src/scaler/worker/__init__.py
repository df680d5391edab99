"""The worker: an agent process (scaler.worker.agent) and its processor processes (scaler.worker.processor)."""
