"""A launch's life as data: the record, its phases, what a change means
to people, its health, and how it looks in a thread."""
