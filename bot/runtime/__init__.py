"""Starting the bot: the CLI, roles, the service wiring, metrics, doctor and the demo."""
