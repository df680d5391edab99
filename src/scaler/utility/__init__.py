"""scaler 1.9.9's `scaler.utility` names that user code imported (issue 29), kept on this version's ground:
`network_util.get_available_tcp_port`, `logging.utility.setup_logger`, `logging.scoped_logger.ScopedLogger`,
`exceptions.*` (this version's errors under their old names, so `except` clauses catch what is raised now) and
`zmq_config.ZMQConfig`. Importing any other of 1.9.9's `scaler.utility` or `scaler.io` modules raises a
ModuleNotFoundError that says where its names went (scaler.compat.moved)."""

from scaler.compat import moved as _moved

_moved.install()
