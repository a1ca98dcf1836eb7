"""The bot's core: what each command and button does.

Fast paths only: parse, check policy, write to Redis and answer. Launching is
the workers' job and watching the poller's. A /train asks Slurm only when its job
would start (``sbatch --test-only``, one round trip, at most
``start_estimate_timeout_s``); /cancel, /logs and /clusters make one SSH round trip.
Each goes through ``calls`` (:class:`bot.gateway.asks.ClusterCalls`): this process's own keys,
or in the web role, which holds none, a worker's.

:class:`Core` routes each command, button and event to the module that does it:
:mod:`bot.core.directory` (who is asking), :mod:`bot.core.lookup` (which launch, and may
they), :mod:`bot.core.train` and :mod:`bot.core.sweep_start` (new launches),
:mod:`bot.core.decisions` (cancel, approve, retry), :mod:`bot.core.app_home` and
:mod:`bot.core.capacity` (the App Home and /clusters).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from bot.core import (
    after_actions,
    answers,
    api_tokens,
    checkpoint_actions,
    checkpoint_list,
    images,
    record_view,
    sweep_answers,
    usage,
    watching,
)
from bot.core.app_home import AppHome
from bot.core.capacity import CapacityCache
from bot.core.decisions import Decisions
from bot.core.directory import UNCONFIRMED_GROUPS, Directory
from bot.core.launch_form import LaunchForm
from bot.core.lookup import Lookup
from bot.core.node_ledger import NodeLedger
from bot.core.rates import slow_down
from bot.core.redact import Redactor
from bot.core.sweep_start import start_sweep
from bot.core.train import Launcher
from bot.gateway.asks import ClusterCalls
from bot.gateway.identity import NoUser, People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.store.store import Store
from bot.text.actions import (
    ACTION_APPROVE,
    ACTION_ATTACH,
    ACTION_CANCEL,
    ACTION_CANCEL_MEMBER,
    ACTION_CKPT_EXPORT,
    ACTION_CKPT_NEW_RUN,
    ACTION_EDIT_RELAUNCH,
    ACTION_EVALUATE,
    ACTION_EXPORT,
    ACTION_FORM_CHECK,
    ACTION_HELP,
    ACTION_LOGS,
    ACTION_NODE_DRAIN,
    ACTION_NODE_RESUME,
    ACTION_PREFS,
    ACTION_PRUNE,
    ACTION_RECORD,
    ACTION_REJECT,
    ACTION_RESUME,
    ACTION_RETRY,
    ACTION_RUN_AGAIN,
    ACTION_TOKEN_CREATE,
    ACTION_TOKEN_REVOKE,
    ACTION_USE_PARTITION,
    SHORTCUT_LAUNCH,
    VIEW_EVALUATE,
    VIEW_LAUNCH,
    VIEW_NODE_DRAIN,
    VIEW_RELAUNCH,
)
from bot.text.front import GROUP_EVENTS, HOME_EVENT, Front, Incoming, Reply
from bot.text.mrkdwn import HELP_TOPICS, escape
from bot.wording import refusals
from cluster.errors import TrainbotError
from commands.context import CommandContext, User
from commands.dispatch import parse_command
from commands.errors import CommandError
from commands.help import help_text, recipes_text
from commands.job_commands import parse_job_ref
from commands.requests import (
    AttachRequest,
    CancelRequest,
    CheckpointsRequest,
    ClustersRequest,
    HelpRequest,
    ImagesRequest,
    InteractiveRequest,
    JobsRequest,
    LogsRequest,
    RecipesRequest,
    ShellRequest,
    SweepRequest,
    TrainRequest,
    UnwatchRequest,
    UsageRequest,
    WatchRequest,
)
from commands.values import parse_keep

log = logging.getLogger(__name__)
LAUNCH_FORMS = frozenset(
    {
        ACTION_RUN_AGAIN,
        ACTION_EDIT_RELAUNCH,
        ACTION_FORM_CHECK,
        SHORTCUT_LAUNCH,
        VIEW_LAUNCH,
        VIEW_RELAUNCH,
    }
)  # the launch form: Run again, Edit & relaunch, the shortcut, checks and submissions


def resumed(launch: Launch) -> TrainRequest:
    """The request that goes on from ``launch``'s newest checkpoint (``from=``): the same
    run, waiting for nothing; only a run that stopped early and was not resumed has one."""
    if launch.outcome != "STOPPED_EARLY" or not isinstance(launch.request, TrainRequest):
        raise CommandError(
            f"{launch.id} did not stop early ({launch.outcome or launch.phase.value}): "
            "only a run that stopped early goes on from its checkpoint with this button."
        )
    update = {"start_from": launch.id, "after": None, "after_any": False, "at": None}
    return launch.request.model_copy(update=update)


class Core:
    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        context: CommandContext,
        front: Front | None = None,
        *,
        calls: ClusterCalls | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        """``calls``: how this process asks the clusters (by default itself, with its own
        keys; the web role asks the workers: :class:`bot.gateway.asks.WorkerAsks`).
        ``redactor``: secret values taken out of every reply (none by default)."""
        self.store = store
        self.clusters = clusters
        self.calls: ClusterCalls = calls or clusters
        self.context = context
        self.front = front
        self.redactor = redactor or Redactor()
        self.people = People(clusters, front, self.calls)
        self.directory = Directory(context, clusters, front)
        self.lookup = Lookup(store, clusters, context)
        self.capacity = CapacityCache(store, clusters, self.calls, context)
        self.ledger = NodeLedger(store, self.calls, context, self.people)
        self.app_home = AppHome(store, context, self.capacity, self.directory)
        self.launcher = Launcher(
            store, clusters, self.calls, context, front, self.people, self.lookup
        )
        self.decisions = Decisions(store, self.calls, context, self.lookup)
        self.form = LaunchForm(self.launcher)

    async def __call__(self, incoming: Incoming) -> Reply:
        reply = await self._answer(incoming)
        if reply.error and self.directory.unconfirmed:  # a refusal may be for want of a group
            reply = replace(reply, text=reply.text + UNCONFIRMED_GROUPS)
        if not self.redactor:
            return reply
        return replace(
            reply,
            text=self.redactor(reply.text),
            blocks=self.redactor.data(reply.blocks),
            file_content=self.redactor.blob(reply.file_content),
        )

    async def _answer(self, incoming: Incoming) -> Reply:
        try:
            if incoming.event == HOME_EVENT:
                return await self.app_home.home(incoming.user_id)
            if incoming.event:
                return self.on_event(incoming)
            if incoming.action_id:
                return await self.on_action(incoming)
            return await self.on_command(incoming)
        except NoUser as exc:  # names the admins to ask, as mentions
            return Reply(refusals.no_user(exc.facts), error=True)
        except CommandError as exc:  # its text may quote what the user typed
            return Reply(escape(str(exc)), error=True)
        except TrainbotError as exc:
            log.warning("command %s failed: %s", incoming.command or incoming.action_id, exc)
            return Reply(f"That did not work: {escape(str(exc))}", error=True)

    def on_event(self, incoming: Incoming) -> Reply:
        """A user group's members changed: ask Slack again at the next check."""
        if incoming.event in GROUP_EVENTS and incoming.action_value:
            self.directory.forget(incoming.action_value)
            log.info("user group %s changed; membership will be asked again", incoming.action_value)
        return Reply("")

    async def on_command(self, incoming: Incoming) -> Reply:  # noqa: C901 - one branch a command
        user = await self.directory.user(incoming)
        request = parse_command(incoming.command, incoming.text, user=user, context=self.context)
        if isinstance(request, TrainRequest | InteractiveRequest):
            return await self.launcher.train(request, incoming, user)
        if isinstance(request, SweepRequest):
            return await start_sweep(self.launcher, request, incoming, user)
        if isinstance(request, HelpRequest):
            return Reply(help_text(self.context, request.topic))
        if isinstance(request, RecipesRequest):
            return Reply(recipes_text(self.context, request.workload))
        if isinstance(request, JobsRequest) and request.watching:
            return await watching.listing(self.store, user)
        if isinstance(request, WatchRequest):  # who may see its logs may watch it
            return await watching.watch(
                self.store, await self.lookup.readable(request.job, user), user
            )
        if isinstance(request, CheckpointsRequest):
            launch = await self.lookup.readable(request.job, user)
            person = await checkpoint_list.person_bytes(self.store, launch.user_id)
            return checkpoint_list.listing(launch, request.keep, person)
        if isinstance(request, UnwatchRequest):
            return await watching.unwatch(
                self.store, (await self.lookup.find(request.job)).id, user
            )
        if isinstance(request, JobsRequest) and request.history:
            if request.all_users and not self.context.policy.is_admin(user.id, user.groups):
                raise CommandError(
                    "Only trainbot admins see everyone's history; /jobs history shows yours."
                )
            return await answers.history(
                self.store,
                user,
                all_users=request.all_users,
                cluster=request.cluster,
                days=request.days,
            )
        if isinstance(request, JobsRequest):
            return await answers.jobs(
                self.store,
                user,
                all_users=request.all_users,
                cluster=request.cluster,
                visible=None if self._admin(user) else self.capacity.visible(user),
            )
        if isinstance(request, ClustersRequest):
            reply = await self.capacity.cluster_list(request.cluster, user)
            names = [request.cluster] if request.cluster else list(self.clusters.profiles)
            return await self.ledger.with_ledger(reply, names, user)
        if isinstance(request, CancelRequest) and request.job.is_sweep_id:
            members = await self.lookup.sweep_members(request.job.id, user, "cancel")
            return sweep_answers.confirm_cancel(*members)
        if isinstance(request, CancelRequest):
            launch = await self.lookup.actable(request.job, user, "cancel")
            return answers.confirm_cancel(launch)
        if isinstance(request, LogsRequest):
            launch = await self.lookup.readable(request.job, user)
            await slow_down(self.store, self.context, user.id, "commands")
            if request.plot:
                return await answers.plot(launch)
            return await answers.logs(self.calls, launch, request.lines or 50)
        if isinstance(request, ImagesRequest) and request.action != "list":
            await slow_down(self.store, self.context, user.id, "commands")
            return await images.start(self.store, self.people, self.front, incoming, user, request)
        if isinstance(request, ImagesRequest):
            await slow_down(self.store, self.context, user.id, "commands")
            return await images.answer(self.calls, self.context, user, request)
        if isinstance(request, ShellRequest):
            return await answers.shell(self.store, self.clusters, user, request)
        if isinstance(request, AttachRequest):
            return answers.attach(
                self.clusters, await self.lookup.owned(request.job, user, "attach to")
            )
        if isinstance(request, UsageRequest):
            await slow_down(self.store, self.context, user.id, "commands")  # a chart is costly
            return await usage.answer(
                self.store,
                self.context.policy,
                self.context.clusters,
                user,
                request,
                self.directory.team_members,
            )
        raise CommandError("That command is not handled yet.")

    def _admin(self, user: User) -> bool:
        return self.context.policy.is_admin(user.id, user.groups)

    async def on_relaunch(self, incoming: Incoming, user: User) -> Reply:
        """Run again, Edit & relaunch, the "Launch training" shortcut, and their forms
        submitted."""
        if incoming.action_id == ACTION_RUN_AGAIN:
            return await self.form.run_again(incoming, user)
        if incoming.action_id == ACTION_EDIT_RELAUNCH:
            return await self.form.edit_form(incoming, user)
        if incoming.action_id == SHORTCUT_LAUNCH:
            return self.form.new_form()
        if incoming.action_id == ACTION_FORM_CHECK:
            return await self.form.check_form(incoming, user)
        if incoming.action_id == VIEW_LAUNCH:
            return await self.form.typed(incoming, user)
        return await self.form.relaunch(incoming, user)

    async def on_checkpoint(self, incoming: Incoming, user: User) -> Reply:
        """/checkpoints' buttons on one checkpoint: Resume from this one (a /train typed by
        its owner, admitted as one), New run from it (the launch form, filled in) and
        Export (that checkpoint)."""
        launch_id, step = checkpoint_actions.split_value(incoming.action_value)
        ref = parse_job_ref(launch_id, None, self.context)
        if incoming.action_id == ACTION_CKPT_EXPORT:
            launch = await self.lookup.owned(ref, user, "export")
            return await after_actions.ask(self.store, self.context, launch, user, step=step)
        if incoming.action_id == ACTION_CKPT_NEW_RUN:
            launch = await self.lookup.owned(ref, user, "start a new run from")
            return checkpoint_actions.new_run_form(launch, step)
        launch = await self.lookup.owned(ref, user, "resume")
        request = checkpoint_actions.resume_request(launch, step)
        await slow_down(self.store, self.context, user.id, "launches")
        return await self.launcher.train(
            request, replace(incoming, channel_id=launch.channel), user
        )

    async def on_token(self, incoming: Incoming, user: User) -> Reply:
        """An API token made or revoked in the App Home (built again after it)."""
        self.app_home.forget(user.id)
        if incoming.action_id == ACTION_TOKEN_CREATE:
            return await api_tokens.create(self.store, user, incoming.action_value)
        return await api_tokens.revoke(self.store, user, incoming.action_value)

    async def on_action(self, incoming: Incoming) -> Reply:  # noqa: C901 - one branch a button
        user = await self.directory.user(incoming)
        if incoming.action_id == ACTION_USE_PARTITION:
            return await self.launcher.use_partition(incoming, user)
        if incoming.action_id in LAUNCH_FORMS:
            return await self.on_relaunch(incoming, user)
        if incoming.action_id in (ACTION_TOKEN_CREATE, ACTION_TOKEN_REVOKE):  # App Home
            return await self.on_token(incoming, user)
        if incoming.action_id == ACTION_HELP:  # the help card: answered as if typed
            if incoming.action_value not in HELP_TOPICS:
                raise CommandError("That help button is not one trainbot made; try /train help.")
            command, text = HELP_TOPICS[incoming.action_value]
            return await self.on_command(
                replace(incoming, action_id="", command=command, text=text)
            )
        if incoming.action_id.startswith(ACTION_PREFS):  # App Home: built again after it
            self.app_home.forget(user.id)
            tz = await self.directory.people_tz(user.id)
            return await watching.change_prefs(self.store, user.id, incoming.action_value, tz)
        if incoming.action_id in (ACTION_NODE_DRAIN, ACTION_NODE_RESUME, VIEW_NODE_DRAIN):
            return await self.ledger.on_action(incoming, user)
        if incoming.action_id in checkpoint_actions.ACTIONS:
            return await self.on_checkpoint(incoming, user)
        ref = parse_job_ref(incoming.action_value, None, self.context)  # as if typed
        if ref.is_sweep_id:
            return await self.decisions.on_sweep_action(incoming.action_id, ref.id, user)
        if incoming.action_id == ACTION_RECORD:
            return record_view.record_reply(await self.lookup.readable(ref, user))
        if incoming.action_id.startswith(ACTION_PRUNE):  # the owner or an admin only
            keep = parse_keep(incoming.action_id.removeprefix(ACTION_PRUNE))
            launch = await self.lookup.owned(ref, user, "delete checkpoints of")
            return await checkpoint_list.prune(self.store, self.calls, launch, user, keep)
        if incoming.action_id == ACTION_CANCEL_MEMBER:
            return answers.confirm_cancel(await self.lookup.actable(ref, user, "cancel"))
        if incoming.action_id == ACTION_CANCEL:
            return await self.decisions.cancel(await self.lookup.actable(ref, user, "cancel"), user)
        if incoming.action_id == ACTION_LOGS:
            launch = await self.lookup.readable(ref, user)
            await slow_down(self.store, self.context, user.id, "commands")
            return await answers.logs(self.calls, launch, 50)
        if incoming.action_id == ACTION_ATTACH:
            return answers.attach(self.clusters, await self.lookup.owned(ref, user, "attach to"))
        if incoming.action_id in (ACTION_APPROVE, ACTION_REJECT):
            return await self.decisions.approve(
                await self.lookup.find(ref), user, incoming.action_id == ACTION_APPROVE
            )
        if incoming.action_id == ACTION_RETRY:
            launch = await self.lookup.actable(ref, user, "retry")
            await slow_down(self.store, self.context, user.id, "launches")
            return await self.decisions.retry(launch, user)
        if incoming.action_id in (ACTION_EXPORT, ACTION_EVALUATE, VIEW_EVALUATE):
            launch = await self.lookup.owned(ref, user, "export or evaluate")
            if incoming.action_id == ACTION_EVALUATE:
                return after_actions.evaluate_form(self.context, launch)
            text = incoming.text if incoming.action_id == VIEW_EVALUATE else ""
            if incoming.action_id == VIEW_EVALUATE and not text.strip():
                raise CommandError("Name at least one task, for example arc_easy.")
            return await after_actions.ask(self.store, self.context, launch, user, text)
        if incoming.action_id == ACTION_RESUME:  # as if its owner typed /train ... from=<it>
            launch = await self.lookup.owned(ref, user, "resume")
            return await self.launcher.train(resumed(launch), incoming, user)
        return Reply(f"That button ({escape(incoming.action_id)}) is not handled yet.", error=True)
