# Seed 000 (Additional Features), "Client Shutdown": exactly as written. Needs a scheduler started NOT in
# protected mode at tcp://127.0.0.1:2345 (e.g. scaler_scheduler --no-protected tcp://127.0.0.1:2345); it stops
# that scheduler and its workers. Against a protected scheduler (the default) it raises ProtectedModeError.
from scaler import Client

client = Client(address="tcp://127.0.0.1:2345")
client.shutdown()
