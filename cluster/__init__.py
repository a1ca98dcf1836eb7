"""Everything that touches a cluster, in rooms that stand in floors (top down; a room
imports only the rooms below it, and cluster/ never imports bot/ or commands/):

- ``frameworks/``: one job model per training framework (NeMo, NeMo-RL, Megatron-Bridge);
- ``preflight/``: checks before a launch, discovery of a cluster, its GPUs;
- ``images/``: what images a cluster has, and copying or converting them;
- ``launching/``: a launch's spec, its submission, the recipes, the run record, finding
  a launch's jobs again;
- ``watching/``: reading a running job (collector, progress, evidence, diagnosis, the
  failure catalog, ``Tracking``, checkpoints);
- ``site/``: a cluster as configured (profiles, login, accounts, nodes, images named,
  the framework registry);
- ``ssh/``: the one user of asyncssh (the pool, connections, host keys, the CA) and
  running commands and Python on the login node;
- ``slurm/``: pure builders and parsers for Slurm's tools;
- ``errors.py``: the errors every room raises.
"""
