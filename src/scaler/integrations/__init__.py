"""Scaler under other libraries' APIs, each a thin layer over the public client API (docs/integrations.md):

- scaler.integrations.dask: Dask's scheduler protocol (dask.compute(..., scheduler=client) or client.dask_get);
- scaler.integrations.joblib: a joblib backend (also scaler.joblib);
- scaler.integrations.ray: Ray's task API (also scaler.compat.ray; import it as ray).

None patches the library it serves (only the joblib backend imports it: it subclasses joblib's backend class); none
reads a private name of the client or the worker, nor the monitor: what they need (the cluster's size, whether code
runs in a task) is public (Client.cluster_resources, scaler.task_context). See ADR 0016.
"""
