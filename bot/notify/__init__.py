"""Delivery: the outbox to Slack or the console, DMs, pages, alerts and reports."""
