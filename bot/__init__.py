"""The service: Slack and console front ends, queue and store, workers, scheduler."""
