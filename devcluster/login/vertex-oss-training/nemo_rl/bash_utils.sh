# Helpers for NeMo-RL jobs (dev cluster edition). Source it, then:
#   nemorlinteractive N   open a shell on compute node N (0-based) of your newest
#                         running job; needs CLUSTER_TYPE set.
nemorlinteractive() {
    if [ -z "${CLUSTER_TYPE:-}" ]; then
        echo "nemorlinteractive: set CLUSTER_TYPE first (hcc-a3m, hcc-a3u, hcc-a4 or hcc-a3h)" >&2
        return 2
    fi
    local index=${1:-0} job nodes node
    job=$(squeue -h -u "$USER" -t RUNNING -o '%i' --sort=-i | head -n 1)
    if [ -z "$job" ]; then
        echo "nemorlinteractive: you have no running job" >&2
        return 1
    fi
    nodes=$(squeue -h -j "$job" -o '%N')
    node=$(scontrol show hostnames "$nodes" | sed -n "$((index + 1))p")
    if [ -z "$node" ]; then
        echo "nemorlinteractive: job $job has no node $index" >&2
        return 1
    fi
    srun --jobid="$job" --overlap --nodes=1 --ntasks=1 -w "$node" --pty bash -l
}
