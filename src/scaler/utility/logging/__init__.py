"""scaler 1.9.9's scaler.utility.logging (see scaler.utility)."""
