"""CurveZMQ keys: the files that let a scheduler admit only the clients and workers it knows."""
