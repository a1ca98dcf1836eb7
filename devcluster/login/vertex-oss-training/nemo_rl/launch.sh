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
# That is the seed's layout, the default. With the knob rl_layout=ray.sub (or
# rl_layout_<cluster type>=ray.sub: see ../_devcluster/standin.py) it writes what
# NeMo-RL's own ray.sub writes (NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909,
# ray.sub): <submit dir>/<job id>-logs/ (<job id>-<restart>-logs after a requeue) with
# ray-driver.log, ray-head.log and ray-worker-N.log, and <submit dir>/<job id>-attach.sh;
# checkpoints stay in <job id>/checkpoints.
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
knob() {
    python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import standin; k = standin.knobs(); print(k.get(sys.argv[2], k.get(sys.argv[3], sys.argv[4])))' \
        "$RL_DIR/../_devcluster" "$1_$CLUSTER_TYPE" "$1" "$2"
}
LAYOUT=$(knob rl_layout seed)
JOB_DIR=$RL_DIR/$SLURM_JOB_ID
if [ "$LAYOUT" = ray.sub ]; then
    # As ray.sub: logs under BASE_LOG_DIR (default: the submit directory); a restart
    # (SLURM_RESTART_COUNT is set only then) gets its own log dir.
    BASE_LOG_DIR=${BASE_LOG_DIR:-$RL_DIR}
    if [ -n "${SLURM_RESTART_COUNT:-}" ]; then
        LOG_DIR=$BASE_LOG_DIR/$SLURM_JOB_ID-$SLURM_RESTART_COUNT-logs
    else
        LOG_DIR=$BASE_LOG_DIR/$SLURM_JOB_ID-logs
    fi
    DRIVER_LOG=$LOG_DIR/ray-driver.log
    HEAD_LOG=$LOG_DIR/ray-head.log
    ATTACH=$RL_DIR/$SLURM_JOB_ID-attach.sh
    mkdir -p "$JOB_DIR/checkpoints" "$LOG_DIR"
    for ((i = 0; i < SLURM_JOB_NUM_NODES - 1; i++)); do
        echo "[$(date '+%F %T')] ray worker $i joined" >"$LOG_DIR/ray-worker-$i.log"
    done
else
    DRIVER_LOG=$JOB_DIR/nemo_rl_output.log
    HEAD_LOG=$JOB_DIR/ray-logs/ray-head.log
    ATTACH=$JOB_DIR/attach.sh
    mkdir -p "$JOB_DIR/checkpoints" "$JOB_DIR/ray-logs"
fi
export CLUSTER_TYPE NEMO_RL_JOB_DIR=$JOB_DIR
# shellcheck source=/dev/null
source "$RL_DIR/configs/auth.sh"
# shellcheck source=/dev/null
source "$RL_DIR/bash_utils.sh"

HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "[$(date '+%F %T')] ray head started on $HEAD_NODE ($SLURM_JOB_NUM_NODES nodes, $CLUSTER_TYPE, container $CONTAINER)" \
    >"$HEAD_LOG"

if [ "$INTERACTIVE" = 1 ]; then
    delay=$(knob attach_delay_s 10)
    sleep "$delay"
    cat >"$ATTACH.tmp" <<ATTACH
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
    chmod +x "$ATTACH.tmp"
    mv "$ATTACH.tmp" "$ATTACH"
    echo "Interactive job $SLURM_JOB_ID is ready: bash $ATTACH"
    # Hold the allocation until the job is cancelled or reaches its time limit.
    exec sleep infinity
fi

echo "NeMo-RL job $SLURM_JOB_ID: $JOB_SCRIPT ${ARGS[*]:-} -> $DRIVER_LOG"
bash "$RL_DIR/$JOB_SCRIPT" "${ARGS[@]}" >"$DRIVER_LOG" 2>&1
