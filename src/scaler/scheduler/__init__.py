"""The scheduler process: SchedulerServer (the shell) around scaler.core.scheduler.SchedulerCore."""
