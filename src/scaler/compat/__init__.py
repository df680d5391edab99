"""Import paths the documents show for integrations that live in scaler.integrations: scaler.compat.ray (import it as
ray) is scaler.integrations.ray."""
