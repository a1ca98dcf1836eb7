# Secrets for NeMo-RL jobs, sourced by launch.sh inside the job.
# trainbot writes nothing here: it passes HF_TOKEN and WANDB_API_KEY through the
# job's environment. People launching by hand may export them before sbatch, or
# set them here (never commit real tokens).
export HF_TOKEN=${HF_TOKEN:-}
export WANDB_API_KEY=${WANDB_API_KEY:-}
