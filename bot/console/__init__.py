"""The console front end: the same conversation as Slack, in a terminal."""
