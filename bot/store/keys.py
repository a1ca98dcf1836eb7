"""Every Redis key trainbot uses, in one place. All start with ``trainbot:``."""

from __future__ import annotations

PREFIX = "trainbot"

QUEUE = f"{PREFIX}:queue"  # stream of launch ids to pre-flight and submit
QUEUE_GROUP = "workers"
OUTBOX = f"{PREFIX}:outbox"  # stream of messages to post, in order
OUTBOX_GROUP = "notifiers"
ACTIVE = f"{PREFIX}:active"  # set of active launch ids (all users)
DEFERRED = f"{PREFIX}:deferred"  # sorted set: launch ids due back on the queue (score: when)
DEAD_LETTERS = f"{PREFIX}:queue:dead"  # stream of queue entries that kept failing inside trainbot
DEAD_LETTERS_DUE = f"{PREFIX}:queue:dead:due"  # sorted set: dead entry id -> when it is replayed
ASKS = f"{PREFIX}:asks"  # list: cluster work a process without SSH keys asks of the workers
CHARGES = f"{PREFIX}:charges"  # sorted set: one charge record (JSON) per launch -> when it ended


def launch(launch_id: str) -> str:
    return f"{PREFIX}:launch:{launch_id}"


def user_active(user_id: str) -> str:
    return f"{PREFIX}:user:{user_id}:active"


def tracked(cluster: str) -> str:
    """Launches whose Slurm job the poller follows on ``cluster``."""
    return f"{PREFIX}:tracked:{cluster}"


def job(cluster: str, job_id: str) -> str:
    """Slurm job id on a cluster -> launch id (before the per-job-id hash; migrated at start)."""
    return f"{PREFIX}:job:{cluster}:{job_id}"


def job_index(job_id: str) -> str:
    """Hash: cluster -> launch id, for every launch that had Slurm job ``job_id``."""
    return f"{PREFIX}:jobid:{job_id}"


JOB_INDEX_MIGRATED = f"{PREFIX}:migrated:jobid"  # set once the old job keys were moved


def summary(launch_id: str) -> str:
    """A finished launch's compact history entry (JSON); outlives the launch record."""
    return f"{PREFIX}:summary:{launch_id}"


def history(*, user_id: str = "", cluster: str = "") -> str:
    """Sorted set of finished launch ids by end time: everyone's, one user's or one cluster's."""
    if user_id:
        return f"{PREFIX}:history:user:{user_id}"
    if cluster:
        return f"{PREFIX}:history:cluster:{cluster}"
    return f"{PREFIX}:history"


def lease(name: str) -> str:
    """A lease held by one process at a time (the poller of a cluster, the notifier)."""
    return f"{PREFIX}:lease:{name}"


def posted(event_id: str) -> str:
    """Set once an outbox entry has reached the front end, so a redelivery is not posted twice."""
    return f"{PREFIX}:posted:{event_id}"


def dedupe(name: str) -> str:
    return f"{PREFIX}:dedupe:{name}"


def seen(name: str) -> str:
    """A signed Slack request already handled (replays are dropped while it lives)."""
    return f"{PREFIX}:seen:{name}"


# -- the notifier's lanes: outbox entries moved here until delivered or dead-lettered --
NOTIFY_LANES = f"{PREFIX}:notify:lanes"  # sorted set: lane -> when its first entry is next tried
NOTIFY_HELD = f"{PREFIX}:notify:held"  # hash: entry id -> the entry (JSON)
NOTIFY_TRIES = f"{PREFIX}:notify:tries"  # hash: entry id -> failed deliveries so far
NOTIFY_DEAD_LETTERS = f"{PREFIX}:notify:dead"  # list: what could not be delivered, oldest first
NOTIFY_RETRYING = f"{PREFIX}:notify:retrying"  # hash: entry id -> its dead letter, still retried
NOTIFY_FIRST_FAILED = f"{PREFIX}:notify:first-failed"  # hash: entry id -> its first failure
NOTIFY_GIVEN_UP = f"{PREFIX}:notify:given-up"  # list: dead letters given up for good, oldest first


def notify_lane(lane: str) -> str:
    """The entry ids of one lane (a launch's thread, or its pages), in order."""
    return f"{PREFIX}:notify:lane:{lane}"


def no_thread(launch_id: str) -> str:
    """Set once a launch's parent message went to the dead letters: its worker ends it."""
    return f"{PREFIX}:notify:no-thread:{launch_id}"


def rate(name: str, user_id: str) -> str:
    """Sorted set: when ``user_id`` last did what the rate limit ``name`` counts."""
    return f"{PREFIX}:rate:{name}:{user_id}"


def bad_channel(launch_id: str) -> str:
    """Set while a launch's channel refuses the bot (its owner was told once)."""
    return f"{PREFIX}:notify:bad-channel:{launch_id}"


def usage(cluster: str, week: str) -> str:
    """Hash: Slack user id -> GPU-hours charged on ``cluster`` in ISO week ``week`` (2026-W49)."""
    return f"{PREFIX}:usage:{cluster}:{week}"


def uncharged(cluster: str) -> str:
    """Hash: launch id -> ``<ISO week> <ended at>`` of a launch of ``cluster`` that ended and
    whose GPU-hours (from ``sacct``) are not charged yet."""
    return f"{PREFIX}:uncharged:{cluster}"


def after_pending(cluster: str) -> str:
    """Set: the launches of ``cluster`` whose export or evaluation (``then=``, or its buttons)
    is to be run or followed by the poller holding the cluster."""
    return f"{PREFIX}:after:{cluster}"


def step_runs(cluster: str, recipe: str, nodes: int) -> str:
    """List of the newest runs' step times (JSON) of one recipe at one size on ``cluster``."""
    return f"{PREFIX}:steps:{cluster}:{recipe}:{nodes}"


def launcher_options(cluster: str, name: str) -> str:
    """What the launcher ``name`` (``<framework>@<login user>``) lists in its ``--help`` on
    ``cluster`` (JSON), learned by pre-flight or ``doctor``; expires, so that a changed
    launcher is read again."""
    return f"{PREFIX}:launcher:{cluster}:{name}"


def team_used(team: str, window: str) -> str:
    """GPU-hours charged to the team budget ``team`` (``group:S0ML``, ``account:proj``) for
    the launches it holds in ``window`` (``2026-W49`` or ``2026-12``)."""
    return f"{PREFIX}:team:{team}:{window}:used"


def team_launches(team: str, window: str) -> str:
    """Set: the launch ids the team budget ``team`` holds in ``window``."""
    return f"{PREFIX}:team:{team}:{window}:launches"


def launch_teams(launch_id: str) -> str:
    """Set: ``<team> <window>`` of each team budget the launch counts against."""
    return f"{PREFIX}:launch:{launch_id}:teams"


def report_posted(period: str) -> str:
    """Set (if absent) by the bot process that posts the usage report of ``period``."""
    return f"{PREFIX}:report:{period}"


def sweep(sweep_id: str) -> str:
    """A sweep's record (JSON): its members in order, their values, its parent message."""
    return f"{PREFIX}:sweep:{sweep_id}"


def store_op(op_id: str) -> str:
    """A store write's done-mark, written in the write's own transaction: a retry after a
    failover that finds it knows the write was applied and does not apply it again."""
    return f"{PREFIX}:op:{op_id}"


def ask_seen(ask_id: str) -> str:
    """An ask id a worker took, kept for the ask's life: the same ask again is refused."""
    return f"{PREFIX}:ask-seen:{ask_id}"


def answer(ask_id: str) -> str:
    """List: a worker's answer to the ask ``ask_id`` (see bot.gateway.asks), kept briefly."""
    return f"{PREFIX}:answer:{ask_id}"


def prefs(user_id: str) -> str:
    """A person's notification preferences (JSON, :class:`bot.lifecycle.prefs.Prefs`)."""
    return f"{PREFIX}:prefs:{user_id}"


def watchers(launch_id: str) -> str:
    """Set: who watches a launch (``/watch``), by Slack user id."""
    return f"{PREFIX}:watchers:{launch_id}"


def watching(user_id: str) -> str:
    """Set: the launch ids a person watches."""
    return f"{PREFIX}:watching:{user_id}"


def quiet_held(lane: str) -> str:
    """Set while quiet hours hold a person's DM lane: what waited goes as one message."""
    return f"{PREFIX}:notify:quiet-held:{lane}"


def dm_sent(event_id: str) -> str:
    """Set once the DMs about a thread line (an outbox entry) were written."""
    return f"{PREFIX}:notify:dm-sent:{event_id}"


def token(digest: str) -> str:
    """A personal API token's record (JSON), by the sha256 of the token (never the token)."""
    return f"{PREFIX}:token:{digest}"


def token_id(token_id: str) -> str:
    """A token id -> the sha256 it is kept under (to revoke it by its id)."""
    return f"{PREFIX}:token-id:{token_id}"


def user_tokens(user_id: str) -> str:
    """Set: the ids of a person's API tokens (their App Home lists them)."""
    return f"{PREFIX}:user:{user_id}:tokens"


# -- the node ledger (bot.store.nodes): each node's failures across launches --
NODE_HISTORY = 50  # entries kept per node (newest first)
NODE_KEEP_S = 90 * 86400  # a node with no entry for this long is forgotten


def nodes(cluster: str) -> str:
    """Sorted set: node name -> when its newest ledger entry was written."""
    return f"{PREFIX}:nodes:{cluster}"


def node(cluster: str, name: str) -> str:
    """List: a node's ledger entries (JSON, :class:`bot.store.nodes.NodeEntry`), newest first."""
    return f"{PREFIX}:node:{cluster}:{name}"


# --- image runs (/images import and fetch) --------------------------------------------------

IMAGE_RUNS_ACTIVE = f"{PREFIX}:images:active"  # set of the image runs not ended yet
IMAGE_RUN_KEEP_S = 30 * 86400  # an ended image run's record is kept this long


def image_run(run_id: str) -> str:
    """One image run's record (JSON): bot.lifecycle.image_run.ImageRun."""
    return f"{PREFIX}:images:run:{run_id}"
