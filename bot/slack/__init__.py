"""The Slack edge: the slack-bolt app, HTTP and Socket Mode serving, and the Web API front."""
