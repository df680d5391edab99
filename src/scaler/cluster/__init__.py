"""Local clusters: a scheduler and workers started together from Python."""
