"""Settings: the config file, the environment, schedules and log set-up."""
