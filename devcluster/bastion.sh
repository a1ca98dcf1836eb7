# The dev cluster's bastion and the login node behind it. Sourced by devcluster/up and
# devcluster/down (after common.sh), not run.
# shellcheck shell=bash
#
# The login node on 127.0.0.1:2222 stays as it is. A second way into the same login
# node listens on 127.0.0.1:$HIDDEN_PORT inside the network namespace $HIDDEN_NETNS,
# where nothing outside that namespace can reach it; each connection there runs
# `sshd -i` back in the host's namespace (so Slurm, the homes and the recipes are the
# login node's own). The bastion listens on 127.0.0.1:$BASTION_PORT on the host and runs
# each connection's `sshd -i` inside $HIDDEN_NETNS: it is the only way in. Its one
# account, jump, may only forward to the hidden login node.

HIDDEN_NETNS=trainbot-hidden
HOST_NETNS=trainbot-host # a handle on the host's own network namespace
BASTION_PID=/run/trainbot-devcluster-bastion.pid
HIDDEN_PID=/run/trainbot-devcluster-hidden-login.pid

netns_handle_ok() {
    mountpoint -q "/run/netns/$HOST_NETNS" &&
        [ "$(stat -L -c %i "/run/netns/$HOST_NETNS")" = "$(stat -L -c %i /proc/self/ns/net)" ]
}

# setup_netns: the hidden namespace and the handle on the host's; 1 where this machine
# cannot make network namespaces (a container without CAP_SYS_ADMIN). Called in an `if`,
# where set -e does not apply: every step says its own failure.
setup_netns() {
    mkdir -p /run/netns || return 1
    if ! netns_handle_ok; then
        umount "/run/netns/$HOST_NETNS" 2>/dev/null
        touch "/run/netns/$HOST_NETNS" || return 1
        mount --bind /proc/self/ns/net "/run/netns/$HOST_NETNS" || return 1
    fi
    if ! ip netns list | grep -qw "^$HIDDEN_NETNS"; then
        ip netns add "$HIDDEN_NETNS" || return 1
    fi
    ip -n "$HIDDEN_NETNS" link set lo up || return 1
}

# bastion_possible: whether the bastion can be set up here; says why not when it cannot
# (the rest of the dev cluster does not need it, and the tests that use the bastion skip
# without its config).
bastion_possible() {
    if setup_netns 2>"$STATE/netns.err"; then
        return 0
    fi
    say "no bastion: this machine cannot make network namespaces ($(head -n 1 "$STATE/netns.err"))"
    rm -f "$project/.devcluster/trainbot-bastion.yaml" "$project/.devcluster/known_hosts_bastion"
    return 1
}

# spawn PIDFILE CMD...: run CMD in the background, detached, its pid in PIDFILE.
spawn() {
    local pidfile=$1
    shift
    setsid "$@" </dev/null >>/var/log/trainbot-devcluster-bastion.log 2>&1 &
    echo $! >"$pidfile"
}

setup_bastion() { # after bastion_possible
    if ! id jump >/dev/null 2>&1; then
        say "creating the bastion's account jump"
        useradd -m -s /usr/sbin/nologin jump
    fi
    usermod -p '*' jump
    install -d -o jump -g jump -m 700 /home/jump/.ssh
    authorize_key jump "$project/.devcluster/id_ed25519.pub"
    if [ ! -f "$STATE/bastion_host_ed25519_key" ]; then
        ssh-keygen -q -t ed25519 -N '' -C "trainbot-devcluster-bastion" \
            -f "$STATE/bastion_host_ed25519_key"
    fi
    sed -e "s#@STATE@#$STATE#g" -e "s/@PORT@/$BASTION_PORT/g" \
        -e "s/@HIDDEN_PORT@/$HIDDEN_PORT/g" "$here/etc/bastion_sshd_config" \
        >"$STATE/bastion_sshd_config"
    /usr/sbin/sshd -t -f "$STATE/bastion_sshd_config"
    # sshd -i reads its configuration afresh for every connection: nothing to reload.
    if ! pidfile_alive "$HIDDEN_PID"; then
        say "starting the hidden login node on 127.0.0.1:$HIDDEN_PORT (namespace $HIDDEN_NETNS)"
        spawn "$HIDDEN_PID" ip netns exec "$HIDDEN_NETNS" socat \
            "TCP-LISTEN:$HIDDEN_PORT,bind=127.0.0.1,reuseaddr,fork" \
            "EXEC:nsenter --net=/run/netns/$HOST_NETNS /usr/sbin/sshd -i -f $STATE/sshd_config"
    fi
    if ! pidfile_alive "$BASTION_PID"; then
        say "starting the bastion on 127.0.0.1:$BASTION_PORT"
        spawn "$BASTION_PID" socat "TCP-LISTEN:$BASTION_PORT,bind=127.0.0.1,reuseaddr,fork" \
            "EXEC:ip netns exec $HIDDEN_NETNS /usr/sbin/sshd -i -f $STATE/bastion_sshd_config"
    fi
    {
        echo "[127.0.0.1]:$BASTION_PORT $(cut -d' ' -f1,2 "$STATE/bastion_host_ed25519_key.pub")"
        echo "[127.0.0.1]:$HIDDEN_PORT $(cut -d' ' -f1,2 "$STATE/ssh_host_ed25519_key.pub")"
    } >"$project/.devcluster/known_hosts_bastion"
    wait_for "the login node through the bastion" 20 bastion_ssh true
}

bastion_ssh() {
    # ProxyCommand rather than -J: -J's own ssh would not take these options.
    local opts=(-q -i "$project/.devcluster/id_ed25519"
        -o UserKnownHostsFile="$project/.devcluster/known_hosts_bastion"
        -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5)
    ssh "${opts[@]}" -p "$HIDDEN_PORT" \
        -o ProxyCommand="ssh ${opts[*]} -p $BASTION_PORT -W %h:%p jump@127.0.0.1" \
        trainer@127.0.0.1 "$@"
}

stop_bastion() {
    stop_pidfile "$BASTION_PID"
    stop_pidfile "$HIDDEN_PID"
    if ip netns list | grep -qw "^$HIDDEN_NETNS"; then
        ip netns del "$HIDDEN_NETNS"
    fi
    if mountpoint -q "/run/netns/$HOST_NETNS"; then
        umount "/run/netns/$HOST_NETNS"
    fi
    rm -f "/run/netns/$HOST_NETNS"
}
