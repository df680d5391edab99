"""Worker managers: units of workers started and stopped where the machines are, as the scheduler asks."""
