"""How trainbot speaks: Slack mrkdwn and Block Kit pieces, plots, and
the Front seam the core speaks through."""
