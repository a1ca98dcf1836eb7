"""The HTTP API (``/api/v1/``): personal tokens checked, then the core's own answers."""
