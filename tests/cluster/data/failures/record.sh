#!/usr/bin/env bash
# Re-record the failure texts in this directory from the dev cluster (devcluster/up).
#
#   tests/cluster/data/failures/record.sh            # every recorded case
#   sudo tests/cluster/data/failures/record.sh node  # also the node failure (needs root)
#
# Each case runs one real job on the dev cluster's stand-in workloads and saves:
#   <case>.log     the job's log (NeMo: the task log; NeMo-RL: nemo_rl_output.log)
#   <case>.out     Slurm's own output for the job (NeMo: sbatch_<name>_<id>.out with
#                  the "srun: error" lines; NeMo-RL: slurm-<id>.out)
#   <case>.sacct   "sacct -D -X -P -n -o JobID,JobName%60,State,ExitCode,DerivedExitCode,Reason,Elapsed,NodeList,ElapsedRaw,AllocTRES"
# Files named hand_*.log are written by hand (see README.md) and are not touched here.
# The dev cluster enforces no accounts or QOS and pends an oversized request
# (PartitionNodeLimit) instead of refusing it, so those texts are hand-written too.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project=$(cd "$here/../../../.." && pwd)
dev=$project/.devcluster
SACCT="sacct -D -X -P -n -o JobID,JobName%60,State,ExitCode,DerivedExitCode,Reason,Elapsed,NodeList,ElapsedRaw,AllocTRES"
RL="cd ~/vertex-oss-training/nemo_rl"
NEMO="cd ~/vertex-oss-training/nemo && NEMORUN_HOME=\$PWD"
TINY="DEVCLUSTER_STEPS=4 DEVCLUSTER_STEP_TIME_S=0.1 DEVCLUSTER_SAVE_TIME_S=0.05"

remote() {
    ssh -q -i "$dev/id_ed25519" -o "UserKnownHostsFile=$dev/known_hosts" \
        -o StrictHostKeyChecking=yes -o BatchMode=yes -p 2222 trainer@127.0.0.1 \
        "bash -lc $(printf %q "$1")"
}

wait_done() {  # job id -> waits until sacct shows a terminal state with a partition
    for _ in $(seq 1 300); do
        row=$(remote "sacct -X -P -n -o State,Partition -j $1" | tail -n 1)
        case "$row" in
        COMPLETED\|?* | FAILED\|?* | CANCELLED*\|?* | TIMEOUT\|?* | NODE_FAIL\|?* | OUT_OF_MEMORY\|?*) return ;;
        esac
        sleep 1
    done
    echo "job $1 did not end" >&2
    return 1
}

rl() {  # case env [sbatch options]
    local case=$1 env=$2 opts=${3:-} job
    job=$(remote "$RL && $TINY $env sbatch --parsable -N 1 -p a3h $opts launch.sh --cluster_type hcc-a3h --job_script algorithms/sft.sh")
    wait_done "$job"
    remote "$RL && cat $job/nemo_rl_output.log" >"$here/$case.log"
    remote "$RL && cat slurm-$job.out" >"$here/$case.out"
    remote "$SACCT -j $job" >"$here/$case.sacct"
    echo "$case: job $job $(cut -d'|' -f3 "$here/$case.sacct" | tr '\n' ' ')"
}

nemo_submit() {  # name env nodes -> prints "job dir"
    local out
    out=$(remote "$NEMO $2 python3 run.py -e slurm --slurm-type hcc-a4 --partition a4 -d \$PWD \
        -i \$PWD/nemo-20250721.sqsh -s sft/llama3p1_8b_sft.py -n $3 --experiment-name $1 \
        --cache-dir ~/.cache/record-failures/$1 --log-dir ~/vertex-oss-training/nemo/logs")
    printf '%s %s\n' "$(sed -n 's/^- Job id: //p' <<<"$out")" "$(sed -n 's/^- Local Directory: //p' <<<"$out")"
}

nemo_save() {  # case job dir
    remote "cat $3/log-*_$2_0.out" >"$here/$1.log"
    remote "cat $3/sbatch_*_$2.out" >"$here/$1.out"
    remote "$SACCT -j $2" >"$here/$1.sacct"
    echo "$1: job $2 $(cut -d'|' -f3 "$here/$1.sacct" | tr '\n' ' ')"
}

nemo() {  # case env nodes
    local job dir
    read -r job dir < <(nemo_submit "rec-$1-$RANDOM" "$2" "$3")
    wait_done "$job"
    nemo_save "$1" "$job" "$dir"
}

node_failure() {  # a 2-node NeMo job loses its second node (root: devcluster/node)
    local job dir victim
    read -r job dir < <(nemo_submit "rec-nodefail-$RANDOM" \
        "DEVCLUSTER_STEPS=300 DEVCLUSTER_STEP_TIME_S=0.5 DEVCLUSTER_TOKENIZER_RACE=off" 2)
    for _ in $(seq 1 60); do
        [ "$(remote "squeue -h -j $job -o %T")" = RUNNING ] && break
        sleep 1
    done
    sleep 3
    victim=$(remote "scontrol show hostnames \$(squeue -h -j $job -o %N) | tail -n 1")
    if [ "$(remote "squeue -h -o %i -w $victim")" != "$job" ]; then
        remote "scancel $job"
        echo "other jobs run on $victim; not failing it under them" >&2
        return 1
    fi
    "$project/devcluster/node" fail "$victim"
    for _ in $(seq 1 120); do
        remote "$SACCT -j $job" | grep -q NODE_FAIL && break
        sleep 1
    done
    sleep 2
    nemo_save node_failure "$job" "$dir" || true
    remote "scancel $job" || true
    "$project/devcluster/node" restore "$victim"
}

trap "remote 'rm -rf ~/.cache/record-failures'" EXIT
if [ "${1:-}" = node ]; then
    node_failure
    exit
fi
rl rl_oom "DEVCLUSTER_FAULT=oom DEVCLUSTER_FAULT_AT_STEP=2"
rl rl_nccl "DEVCLUSTER_FAULT=nccl DEVCLUSTER_FAULT_AT_STEP=2"
rl rl_gated "DEVCLUSTER_FAULT=gated"
rl rl_wandb "DEVCLUSTER_FAULT=wandb"
rl rl_time_limit "DEVCLUSTER_STEPS=600 DEVCLUSTER_STEP_TIME_S=0.5" "--time=1"
nemo nemo_tokenizer_race "$TINY DEVCLUSTER_TOKENIZER_RACE=until_seeded" 1
nemo nemo_oom_2node "$TINY DEVCLUSTER_TOKENIZER_RACE=off DEVCLUSTER_FAULT=oom DEVCLUSTER_FAULT_AT_STEP=1" 2
nemo nemo_nccl "$TINY DEVCLUSTER_TOKENIZER_RACE=off DEVCLUSTER_FAULT=nccl DEVCLUSTER_FAULT_AT_STEP=1" 1
nemo nemo_completed "$TINY DEVCLUSTER_TOKENIZER_RACE=off" 1
