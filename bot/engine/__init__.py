"""The loops that drive launches: the workers (hold, submit, recover), the poller
(tracking, babysitting, GPU watch, charging), starts from a checkpoint, W&B summaries and
sweeps. What they ask of clusters is in ``gateway/``; what they plan, in ``planning/``."""
