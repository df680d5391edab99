# Seed 004 (README), "Start local scheduler and cluster at the same time in code": exactly as written.
# The `...` is where a program would use the cluster; as written it is the Ellipsis literal, which does nothing.
from scaler import SchedulerClusterCombo

cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=4)

...

cluster.shutdown()
