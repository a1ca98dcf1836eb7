#!/bin/bash
#SBATCH --job-name=nemo-rl
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#
# Launch a NeMo-RL job on Slurm (dev cluster edition). From this directory:
#   sbatch -N <nodes> launch.sh --cluster_type hcc-a3m --job_script algorithms/dpo.sh [overrides...]
#   sbatch -N <nodes> launch.sh --cluster_type hcc-a3m --interactive
# The container image is $CONTAINER (as NeMo-RL's own Slurm launcher takes it;
# sbatch exports the submitting shell's environment), by default the release image
# next to this script.
# The job works in <submit dir>/<job id>/: checkpoints/, ray-logs/,
# nemo_rl_output.log and, for --interactive jobs, attach.sh (written once the
# allocation is ready; "bash <job id>/attach.sh" attaches, and can be re-run).
# The dev cluster has no GPUs or containers: the driver is a stand-in that
# prints what NeMo-RL prints (see ../_devcluster/).
set -euo pipefail

usage() {
    echo "usage: sbatch -N <nodes> launch.sh --cluster_type <hcc-a3m|hcc-a3u|hcc-a4|hcc-a3h> (--job_script <algorithms/X.sh> | --interactive) [overrides...]" >&2
    exit 2
}

CLUSTER_TYPE=""
JOB_SCRIPT=""
INTERACTIVE=0
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --cluster_type) [ $# -ge 2 ] || usage; CLUSTER_TYPE=$2; shift 2 ;;
    --job_script) [ $# -ge 2 ] || usage; JOB_SCRIPT=$2; shift 2 ;;
    --interactive) INTERACTIVE=1; shift ;;
    -h | --help) usage ;;
    *) ARGS+=("$1"); shift ;;
    esac
done
case "$CLUSTER_TYPE" in
hcc-a3m | hcc-a3u | hcc-a4 | hcc-a3h) ;;
*) echo "launch.sh: unknown --cluster_type '$CLUSTER_TYPE'" >&2; usage ;;
esac
if [ "$INTERACTIVE" = 0 ] && [ -z "$JOB_SCRIPT" ]; then
    echo "launch.sh: give --job_script or --interactive" >&2
    usage
fi
if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "launch.sh: submit it with sbatch, not run it directly" >&2
    exit 2
fi

RL_DIR=${SLURM_SUBMIT_DIR:-$PWD}
if [ -n "$JOB_SCRIPT" ] && [ ! -f "$RL_DIR/$JOB_SCRIPT" ]; then
    echo "launch.sh: job script not found: $RL_DIR/$JOB_SCRIPT" >&2
    exit 2
fi
CONTAINER=${CONTAINER:-$RL_DIR/nemo_rl-h20250923.sqsh}
if [ ! -f "$CONTAINER" ]; then
    echo "launch.sh: container image not found: $CONTAINER" >&2
    exit 2
fi
JOB_DIR=$RL_DIR/$SLURM_JOB_ID
mkdir -p "$JOB_DIR/checkpoints" "$JOB_DIR/ray-logs"
export CLUSTER_TYPE NEMO_RL_JOB_DIR=$JOB_DIR
# shellcheck source=/dev/null
source "$RL_DIR/configs/auth.sh"
# shellcheck source=/dev/null
source "$RL_DIR/bash_utils.sh"

HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "[$(date '+%F %T')] ray head started on $HEAD_NODE ($SLURM_JOB_NUM_NODES nodes, $CLUSTER_TYPE, container $CONTAINER)" \
    >"$JOB_DIR/ray-logs/ray-head.log"

if [ "$INTERACTIVE" = 1 ]; then
    delay=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import standin; print(standin.knobs().get("attach_delay_s", "10"))' "$RL_DIR/../_devcluster")
    sleep "$delay"
    cat >"$JOB_DIR/attach.sh.tmp" <<ATTACH
#!/bin/bash
# Attach to interactive NeMo-RL job $SLURM_JOB_ID on $HEAD_NODE ($SLURM_JOB_NUM_NODES nodes).
# Re-run it after a lost connection. With arguments, runs them in the allocation instead.
if [ \$# -gt 0 ]; then
    exec srun --jobid=$SLURM_JOB_ID --overlap --nodes=1 --ntasks=1 -w $HEAD_NODE "\$@"
fi
if [ -t 0 ]; then
    exec srun --jobid=$SLURM_JOB_ID --overlap --nodes=1 --ntasks=1 -w $HEAD_NODE --pty bash -l
fi
exec srun --jobid=$SLURM_JOB_ID --overlap --nodes=1 --ntasks=1 -w $HEAD_NODE bash -l
ATTACH
    chmod +x "$JOB_DIR/attach.sh.tmp"
    mv "$JOB_DIR/attach.sh.tmp" "$JOB_DIR/attach.sh"
    echo "Interactive job $SLURM_JOB_ID is ready: bash $JOB_DIR/attach.sh"
    # Hold the allocation until the job is cancelled or reaches its time limit.
    exec sleep infinity
fi

echo "NeMo-RL job $SLURM_JOB_ID: $JOB_SCRIPT ${ARGS[*]:-} -> $JOB_DIR/nemo_rl_output.log"
bash "$RL_DIR/$JOB_SCRIPT" "${ARGS[@]}" >"$JOB_DIR/nemo_rl_output.log" 2>&1
