"""Everything that touches a cluster: profiles, SSH, Slurm, launchers, watching, diagnosis."""
