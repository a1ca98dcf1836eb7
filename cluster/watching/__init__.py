"""Reading a running job: the collector and its remote half, progress lines, evidence,
diagnosis against the failure catalog, ``Tracking``, checkpoints."""
