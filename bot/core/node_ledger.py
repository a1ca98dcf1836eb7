"""The node ledger for on-call: which nodes failed which launches, and Drain / Resume.

What it shows comes from the store's ledger (:mod:`bot.store.nodes`), written by the
poller when a failed job's diagnosis names its faulty node. On-call members (the config's
``alerts.oncall_usergroup``) and trainbot admins see it under ``/clusters`` with a
**Drain** button per node (``scontrol update nodename=<node> state=drain reason=...``)
and **Resume** for a node the bot drained; the weekly report counts it. A drain runs
through the same SSH path and identity rules as a cancel: as the person's Unix user where
the cluster maps people (Slurm then allows it only to its operators), else as the
shared login account; the certificate's key id names the person.
"""

from __future__ import annotations

import logging
import time

from bot.gateway.asks import ClusterCalls
from bot.gateway.identity import People
from bot.store.nodes import NodeEntry, NodeRecord
from bot.store.store import Store
from bot.text.actions import ACTION_NODE_DRAIN, ACTION_NODE_RESUME, VIEW_NODE_DRAIN
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import Block, actions, button, confirm_dialog, escape, section, text_input
from cluster.errors import ClusterError
from cluster.site.nodes import NodeAction, clean_reason
from cluster.slurm.base import HOSTNAME_RE
from commands.context import CommandContext, User
from commands.errors import CommandError

log = logging.getLogger(__name__)

LEDGER_DAYS = 7  # /clusters shows the nodes with a failure in this many days
MAX_NODES = 10  # per cluster, the most failed first


def may_act(context: CommandContext, user: User, oncall_group: str | None) -> bool:
    """On-call members and trainbot admins see the ledger and may drain and resume."""
    if context.policy.is_admin(user.id, user.groups):
        return True
    return bool(oncall_group and oncall_group in user.groups)


def node_value(cluster: str, node: str) -> str:
    return f"{cluster} {node}"


def parse_node_value(value: str, known: list[str]) -> tuple[str, str]:
    """(cluster, node) from a button's value, each checked: a value is text anyone can send."""
    cluster, _, node = value.partition(" ")
    if cluster not in known or not HOSTNAME_RE.fullmatch(node):
        raise CommandError(
            "That node button is not one trainbot made (it names no known cluster and node); "
            "open /clusters again."
        )
    return cluster, node


def drain_reason(record: NodeRecord, user: User) -> str:
    """What a drain from the ledger tells Slurm (``sinfo -R`` shows it to everyone)."""
    causes = ", ".join(dict.fromkeys(e.cause_key for e in record.failures if e.cause_key))
    count = len(record.launches)
    why = f"trainbot: failed {count} launch{'es' if count != 1 else ''}"
    return clean_reason(f"{why} ({causes}), drained by {user.id}" if causes else why)


def ledger_text(record: NodeRecord, now: float) -> str:
    """One line per node: failed launches, causes, when last, drained or not (escaped)."""
    launches = record.launches
    causes = ", ".join(dict.fromkeys(e.cause_key or "unknown" for e in record.failures))
    last = record.failures[0].at if record.failures else 0.0
    ago = f"{max(now - last, 0) / 3600:.0f} h ago" if last else "never"
    line = (
        f"`{escape(record.node)}`: failed {len(launches)} launch"
        f"{'es' if len(launches) != 1 else ''} ({escape(causes)}; last {ago}): "
        + ", ".join(escape(i) for i in launches[:5])
    )
    drained = record.drained
    if drained is not None:
        line += f" · drained by <@{escape(drained.by)}>: {escape(drained.reason)}"
    return line


def ledger_blocks(
    cluster: str, records: list[NodeRecord], user: User, now: float
) -> tuple[list[str], list[Block]]:
    """The ledger of one cluster as text lines and blocks, a Drain or Resume button each."""
    lines: list[str] = []
    blocks: list[Block] = []
    for record in records[:MAX_NODES]:
        text = ledger_text(record, now)
        lines.append(f"• {text}")
        value = node_value(cluster, record.node)
        if record.drained is not None:
            dialog = confirm_dialog(
                f"Resume {record.node}?",
                f"Slurm gives `{escape(record.node)}` jobs again on {escape(cluster)}.",
                confirm="Resume it",
                deny="Leave it drained",
            )
            control = button("Resume", ACTION_NODE_RESUME, value, confirm=dialog)
        else:  # a modal asks for the reason (see NodeLedger.ask_drain)
            control = button("Drain…", ACTION_NODE_DRAIN, value, style="danger")
        blocks += [section(f"*{escape(cluster)}* {text}"), actions(control)]
    return lines, blocks


class NodeLedger:
    """The ledger's answers for the core: shown in /clusters, Drain and Resume."""

    def __init__(
        self, store: Store, calls: ClusterCalls, context: CommandContext, people: People
    ) -> None:
        self.store = store
        self.calls = calls
        self.context = context
        self.people = people

    @property
    def oncall_group(self) -> str | None:
        return self.people.clusters.config.alerts.oncall_usergroup

    async def with_ledger(self, reply: Reply, names: list[str], user: User) -> Reply:
        """``/clusters`` with, for on-call and admins, the nodes that failed launches lately."""
        if reply.error or not may_act(self.context, user, self.oncall_group):
            return reply
        now = time.time()
        since = now - LEDGER_DAYS * 86400
        lines: list[str] = []
        blocks: list[Block] = []
        for name in names:
            records = [
                r for r in await self.store.nodes.node_ledger(name, since=since) if r.failures
            ]
            more_lines, more_blocks = ledger_blocks(name, records, user, now)
            lines += [f"*{escape(name)}* {line[2:]}" for line in more_lines]
            blocks += more_blocks
        if not lines:
            return reply
        head = f"Node ledger (last {LEDGER_DAYS} days, on-call and admins only):"
        text = reply.text + "\n" + head + "\n" + "\n".join(f"• {line}" for line in lines)
        top = [section(reply.text), section(head)]
        return Reply(text, blocks=top + blocks[: 48 - len(top)])

    def _check(self, user: User) -> None:
        if not may_act(self.context, user, self.oncall_group):
            raise CommandError(
                "Only on-call (the on-call user group) and trainbot admins may drain or "
                "resume nodes."
            )

    async def ask_drain(self, user: User, value: str) -> Reply:
        """Drain: a modal with the reason Slurm will keep, proposed from the ledger; its
        submission (:data:`VIEW_NODE_DRAIN`, the block id naming the node) drains."""
        self._check(user)
        cluster, node = parse_node_value(value, list(self.people.clusters.profiles))
        record = await self.store.nodes.node_record(cluster, node)
        text = (
            f"Slurm stops giving `{escape(node)}` new jobs on {escape(cluster)}; jobs on it "
            "run to their end. The reason is kept by Slurm (`sinfo -R`) and the ledger."
        )
        blocks = [
            section(text),
            text_input(value, "Reason", drain_reason(record, user), "letters, digits, punctuation"),
        ]
        return Reply(text, blocks=blocks, modal=f"Drain {node}"[:24], modal_submit=VIEW_NODE_DRAIN)

    async def act(self, user: User, value: str, action: NodeAction, reason: str = "") -> Reply:
        """Drain or resume the node a ledger button names, as the person (see the module)."""
        self._check(user)
        cluster, node = parse_node_value(value, list(self.people.clusters.profiles))
        if action == "drain" and not clean_reason(reason):
            raise CommandError(
                "A drain needs a reason (letters, digits and punctuation), e.g. "
                "'Xid 79 on two launches'; Slurm keeps it for everyone to read."
            )
        reason = clean_reason(reason) if action == "drain" else ""
        cluster_user = await self.people.cluster_user(cluster, user)
        try:
            state = await self.calls.update_node(
                cluster, node, action, reason, user_id=user.id, cluster_user=cluster_user,
                groups=user.groups,
            )  # fmt: skip
        except ClusterError as exc:
            log.warning(
                "node=%s cluster=%s %s by %s refused: %s", node, cluster, action, user.id, exc
            )
            return Reply(
                f"Slurm did not {action} {node} on {cluster}: {escape(str(exc))}. Draining "
                "and resuming need Slurm operator rights for the user it runs as.",
                error=True,
            )
        entry = NodeEntry(kind=action, at=time.time(), by=user.id, reason=reason)
        await self.store.nodes.record_node(cluster, node, entry)
        log.info("node=%s cluster=%s %s by %s: %s", node, cluster, action, user.id, state)
        done = "drained" if action == "drain" else "resumed"
        said = f" (reason: {escape(reason)})" if action == "drain" else ""
        return Reply(f"`{escape(node)}` on {escape(cluster)} {done}{said}; Slurm: {state}.")

    async def on_action(self, incoming: Incoming, user: User) -> Reply:
        """Drain (its modal), the modal submitted, and Resume."""
        if incoming.action_id == ACTION_NODE_DRAIN:
            return await self.ask_drain(user, incoming.action_value)
        if incoming.action_id == VIEW_NODE_DRAIN:
            return await self.act(user, incoming.action_value, "drain", incoming.text)
        return await self.act(user, incoming.action_value, "resume")
