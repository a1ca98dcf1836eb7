"""The launch form: Run again and Edit & relaunch under a finished launch's final line,
the global shortcut "Launch training", the form's text checked as it is typed, and the
form submitted. Each launch goes through :meth:`bot.core.train.Launcher.train`, as if
typed: the form adds no rule of its own."""

from __future__ import annotations

from dataclasses import replace

from bot.core.train import Launcher
from bot.text.actions import ACTION_FORM_CHECK, VIEW_LAUNCH, VIEW_RELAUNCH
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import escape, section, text_input
from commands.admission import admit
from commands.context import User
from commands.dispatch import parse_command
from commands.errors import CommandError
from commands.job_commands import parse_job_ref
from commands.placement import AUTO
from commands.requests import InteractiveRequest, TrainRequest


class LaunchForm:
    """Run again, Edit & relaunch and the shortcut's form, over the launcher."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher

    async def run_again(self, incoming: Incoming, user: User) -> Reply:
        """Run again on a finished launch's final line: its request once more, in its
        channel, checked as if typed now (policy, budget, limits and all)."""
        launch = await self.launcher.lookup.owned(
            parse_job_ref(incoming.action_value, None, self.launcher.context), user, "run again"
        )
        if launch.active:
            raise CommandError(f"{launch.id} is still running; Run again is for a finished one.")
        return await self.launcher.train(
            launch.request, replace(incoming, channel_id=launch.channel), user
        )

    async def edit_form(self, incoming: Incoming, user: User) -> Reply:
        """Edit & relaunch on a final line: a modal holding the launch's request as /train
        text, to change and launch (:meth:`relaunch`)."""
        launch = await self.launcher.lookup.owned(
            parse_job_ref(incoming.action_value, None, self.launcher.context), user, "relaunch"
        )
        text = f"A new launch from {launch.id}; its thread goes to <#{launch.channel}>."
        blocks = [
            section(text),  # ids only: nothing typed by anyone
            text_input(
                launch.id,
                "/train",
                launch.request.to_text().removeprefix("/train "),
                "checked as you type (the policy, budget and GPU-hours); Slurm's start "
                "estimate on Launch",
                check_as=ACTION_FORM_CHECK,
            ),
        ]
        return Reply(text, blocks=blocks, modal="Edit & relaunch", modal_submit=VIEW_RELAUNCH)

    def new_form(self) -> Reply:
        """The global shortcut "Launch training": the same form, empty; its thread goes to
        the person's DM with the bot."""
        text = "A new launch; its thread goes to your DM with trainbot."
        blocks = [
            section(text),
            text_input(
                "new",
                "/train",
                "",
                "e.g. sft llama3p1_8b nodes=2 cluster=a4; checked as you type",
                check_as=ACTION_FORM_CHECK,
            ),
        ]
        return Reply(text, blocks=blocks, modal="Launch training", modal_submit=VIEW_LAUNCH)

    async def check_form(self, incoming: Incoming, user: User) -> Reply:
        """The launch form's text as it is typed: how /train reads it and the same
        admission /train asks (:func:`~commands.admission.admit`: the policy's rule, the
        active-launch limit, images, accounts and budgets), with the GPU-hour estimate from
        earlier runs of its recipe (no cluster is asked: Slurm's start estimate comes on
        Launch); or why it cannot go."""
        text = incoming.action_value.removeprefix("/train ").strip()
        if not text:
            return Reply("")
        launcher = self.launcher
        request = parse_command("/train", text, user=user, context=launcher.context)
        if not isinstance(request, TrainRequest | InteractiveRequest):
            raise CommandError("The launch form takes what follows /train for one launch.")
        words = f"Reads as: `{escape(request.to_text())}`"
        if request.cluster == AUTO:  # placed on Launch, where Slurm would start it first
            return Reply(words)
        active = len(await launcher.store.history.active_ids(user.id))
        standing, cost = await launcher.standing(request, user, active)
        images = launcher.clusters.profile(request.cluster).images
        admission = admit(launcher.context.policy, request, user, images=images, standing=standing)
        if not admission.allowed:
            raise CommandError(admission.reason, field=admission.field)
        lines = [words]
        if cost.gpu_hours is not None:
            lines.append(f"About {cost.gpu_hours:,.1f} GPU-hours ({escape(cost.basis)}).")
        if admission.needs_approval:
            lines.append("It waits for an admin's approval (policy).")
        if admission.over_budget and admission.budget is not None:
            lines.append(f"A launch would be refused: {escape(admission.budget.reason)}")
        return Reply("\n".join(lines))

    async def typed(self, incoming: Incoming, user: User) -> Reply:
        """The shortcut's form submitted: its text as a /train typed in the person's DM
        (``incoming.channel_id``, which the Slack edge opened)."""
        request = parse_command(
            "/train",
            incoming.text.removeprefix("/train "),
            user=user,
            context=self.launcher.context,
        )
        if not isinstance(request, TrainRequest | InteractiveRequest):
            raise CommandError("The launch form takes what follows /train for one launch.")
        return await self.launcher.train(request, incoming, user)

    async def relaunch(self, incoming: Incoming, user: User) -> Reply:
        """The Edit & relaunch modal submitted: its text as a /train typed in the channel of
        the launch it came from (``incoming.action_value``)."""
        launch = await self.launcher.lookup.owned(
            parse_job_ref(incoming.action_value, None, self.launcher.context), user, "relaunch"
        )
        text = incoming.text.removeprefix("/train ")  # as shown, or as if typed after /train
        request = parse_command("/train", text, user=user, context=self.launcher.context)
        if not isinstance(request, TrainRequest | InteractiveRequest):
            raise CommandError("Edit & relaunch takes what follows /train for one launch.")
        return await self.launcher.train(
            request, replace(incoming, channel_id=launch.channel), user
        )
