"""SSH to login nodes: one shared connection per login node; the only asyncssh user.

:class:`~cluster.ssh.pool.SSHPool` keeps one long-lived connection per login node (keepalive on),
caps the channels open on it at once, reconnects with backoff when it drops,
and puts a timeout on every command. Host keys are always checked against the
profile's known_hosts file: an unknown or changed key is refused. asyncssh and
OSError exceptions are translated here into :mod:`cluster.errors`.

A login with no key file but a user CA key logs in with a certificate signed here
for that one username (a fresh key pair, valid ``cert_ttl_s``, no forwarding and no
pty): how the bot acts as a person. Each certificate has its own random serial and a
key id naming the person and what for (``trainbot:<person>:<user>:<launch id>``), which
sshd logs with the login. Such a connection is replaced once its certificate has
expired (the old one is closed after the commands on it had time to finish), and
closed once idle for ``person_idle_s``. The CA key must be the running user's and
unreadable by anyone else (:func:`~cluster.ssh.connect.check_ca_key`), and only a pool made with
``act_as_people=True`` reads it.

A login node behind jump hosts (``login.jump``) is reached through each in turn: one
SSH connection per hop, each tunnelled through the one before and each hop's host key
checked against its known_hosts; the pooled connection is the last, and closing it
closes the hops.

:mod:`cluster.ssh.pool` holds the pool and its connections; :mod:`cluster.ssh.connect`
opens one connection (jump hosts, host keys, key files, the certificates signed here);
:mod:`cluster.ssh.hostkeys` reads the host keys along a route for an admin to confirm.
"""
