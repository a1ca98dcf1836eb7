"""A cluster as a site configures it: profiles and their fields, login, accounts, nodes,
GPUs, image references, the framework registry."""
