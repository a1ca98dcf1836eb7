# Shared by devcluster/up, devcluster/down and devcluster/node. Sourced, not run.
# shellcheck shell=bash

STATE=/var/lib/trainbot-devcluster
CLUSTER_NAME=trainbot-dev
LOGIN_PORT=2222
BASTION_PORT=2200 # the bastion; the login node behind it listens on HIDDEN_PORT (bastion.sh)
HIDDEN_PORT=2201
PEOPLE="alice bob" # login users besides trainer, the bot's shared account
SSHD_PID=/run/trainbot-devcluster-sshd.pid
NEMO_VENV=/opt/trainbot-devcluster/nemo-run
NEMO_RUN_VERSION=0.11.1
# nemo-run 0.11.1 with the newest leptonai fails at import ("No module named
# 'leptonai.api.v1'"); 0.27.3 is the last release that works with it.
LEPTONAI_VERSION=0.27.3

mkdir -p "$STATE"
chmod 700 "$STATE"
if [ ! -s "$STATE/db_pass" ]; then
    (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/db_pass")
fi
DB_PASS=$(cat "$STATE/db_pass")

say() { printf 'devcluster: %s\n' "$*"; }
die() {
    printf 'devcluster: error: %s\n' "$*" >&2
    exit 1
}

# wait_for WHAT SECONDS CMD...: run CMD until it succeeds, or fail after SECONDS.
wait_for() {
    local what=$1 seconds=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "$what did not come up within ${seconds}s"
        sleep 0.5
    done
}

pidfile_alive() {
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

mariadb_root() {
    # Debian's root uses the unix socket; a plain install may use TCP without a password.
    if mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1; then
        mariadb -uroot "$@"
    else
        mariadb -uroot -h127.0.0.1 -P3306 "$@"
    fi
}

mariadb_ping() {
    command -v mariadb >/dev/null 2>&1 || return 1
    mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1 || mariadb -uroot -h127.0.0.1 -P3306 -e 'SELECT 1' >/dev/null 2>&1
}

login_ssh() {
    ssh -q -i "$project/.devcluster/id_ed25519" -p "$LOGIN_PORT" \
        -o UserKnownHostsFile="$project/.devcluster/known_hosts" -o StrictHostKeyChecking=yes \
        -o BatchMode=yes -o ConnectTimeout=5 trainer@127.0.0.1 "$@"
}

stop_pidfile() {
    local pidfile=$1 pid
    pidfile_alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop_slurm() {
    local n
    for n in 0 1 2 3; do stop_pidfile "/run/slurmd-dev$n.pid"; done
    stop_pidfile /run/slurmctld.pid
    stop_pidfile /run/slurmdbd.pid
}
