# Seed 004 (README), "Performance / uvloop": exactly as written (needs `pip install uvloop`). The snippet never
# calls scheduler.shutdown(): the scheduler and its workers stop when this program exits.
from scaler import SchedulerClusterCombo

scheduler = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", event_loop="uvloop", n_workers=4)
