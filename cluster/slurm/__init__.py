"""Pure builders and parsers for Slurm's command-line tools (squeue, scancel, sacct, sinfo,
sbatch) and its pending reasons; no I/O."""
