"""What one poll of a job means for its launch. Pure: snapshot in, launch edits and events out.

Called inside :meth:`~bot.store.launches.Launches.mutate`, so a state change and its thread message
are written together, and a restarted bot never announces the same change
twice (the stored launch already has it).
"""

from __future__ import annotations

import logging
import re
import time

from bot.engine import babysit
from bot.lifecycle import health, phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.settings.sections import Watch
from bot.text.plot import reduce_per_column
from cluster.launching.run_record import digest_from_log
from cluster.launching.spec import framework
from cluster.site.image_refs import is_registry_ref
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import is_terminal, slurm_time_seconds
from cluster.slurm.reasons import explain_pending
from cluster.watching.collector import JobSnapshot
from cluster.watching.diagnosis import Diagnosis
from cluster.watching.progress import Point, complete_lines, run_links
from cluster.watching.tracking import Tracking

log = logging.getLogger(__name__)

PARENT_REFRESH_S = 10.0
FAILURE_TAIL_LINES = 8
HISTORY_MAX = 5000
STEP_TIMES_KEPT = 50
TAIL_LINES = 60
TAIL_CHARS = 16_000


def tracked(launch: Launch) -> Tracking | None:
    """The record the poller hands the collector: the current attempt's, once submitted."""
    attempt = launch.attempt
    if (
        attempt is None
        or not attempt.job_id
        or launch.phase not in (Phase.SUBMITTED, Phase.RUNNING)
    ):
        return None
    return attempt.tracking


class _Step:
    """One poll applied to one launch: collects the thread lines it causes."""

    def __init__(
        self,
        launch: Launch,
        snap: JobSnapshot,
        profile: ClusterProfile,
        watch: Watch,
        now: float,
        diagnosis: Diagnosis | None,
    ):
        self.launch, self.snap, self.profile, self.now = launch, snap, profile, now
        self.watch, self.diagnosis = watch, diagnosis
        self.attempt = launch.attempts[-1]
        self.events: list[Event] = []
        self.visible = False
        # The checkpoint directory was first named in this poll's log: the collector could
        # not list it yet, so an end seen in the same poll waits one poll for its checkpoints.
        self.checkpoints_unread = False

    def tell(self, facts: dict[str, object]) -> None:
        """A thread line as facts (``facts["move"]`` says what it tells; bot.wording words it)."""
        self.events.append(Event("thread", self.launch.id, data=dict(facts)))
        self.visible = True

    def move(self, move: phases.Move, facts: phases.Facts) -> None:
        """A change of phase Slurm's word means: its lines are said like :meth:`tell`'s."""
        self.events += phases.step(move, facts)(self.launch)
        self.visible = True

    def read_log(self) -> bool:
        """New whole lines of the log: progress, and the rolling tail kept for diagnosis."""
        attempt, chunk, launch = self.attempt, self.snap.log, self.launch
        if attempt.tracking is None or not chunk.path:
            return False
        text, used = complete_lines(chunk.text)
        attempt.tracking = self.snap.advance(attempt.tracking, consumed=used)
        # Any growth of the log, a line cut mid-way included, says the run is alive; a cut
        # line read again (its end not written yet: a tqdm bar, a stalled block) is not growth.
        if chunk.text and (chunk.offset > attempt.log_size or chunk.reset):
            attempt.log_grew_at, attempt.log_size = self.now, chunk.offset
        if text:
            lines = [*attempt.tail.splitlines(), *text.splitlines()]  # (the tail ends mid-line)
            attempt.tail = "\n".join(lines[-TAIL_LINES:])[-TAIL_CHARS:]
            self.trackers(text, attempt.tracking)
            self.image_digest(text)
        p, fw = launch.progress, framework(attempt.tracking.framework)
        if text and (ckpt_dir := fw.checkpoint_dir(text, attempt.tracking)):
            self.checkpoints_unread = True  # a directory not listed by this poll's collect
            attempt.tracking = attempt.tracking.model_copy(update={"checkpoint_dir": ckpt_dir})
        val = launch.validation_history[-1][1] if launch.validation_history else None
        carry = (
            Point(p.step, p.total, p.loss, p.step_time_s, p.base, val, p.reward, p.max_steps)
            if p.total
            else None
        )
        progress = fw.parse_progress(text, carry)
        p.stopped_early = progress.stopped_early or p.stopped_early
        p.finished = p.finished or progress.finished
        launch.accuracy_history.extend(progress.accuracy)  # validation may come between steps
        p.accuracy = launch.accuracy_history[-1][1] if launch.accuracy_history else p.accuracy
        last = progress.last
        if last is None:
            return False
        saved = (c.step for c in self.snap.new_checkpoints)
        ended = is_terminal(self.snap.state or "")
        rules = self.watch.health
        for note in health.observe(
            launch, progress, rules, ended=ended, saved_steps=saved, now=self.now
        ):
            self.tell(note)
        # Steps between printed points: the parser's word, else the gap since the last poll's.
        gap = last.step - p.step if p.step and len(progress.points) == 1 else 0
        p.log_interval = progress.interval or (gap if gap > 0 else p.log_interval)
        p.step, p.total, p.base, p.updated_at = last.step, last.total, last.base, self.now
        p.max_steps = last.cap
        p.loss = last.loss if health.finite(last.loss) else p.loss
        p.step_time_s = last.step_time_s if last.step_time_s is not None else p.step_time_s
        p.recent_step_times_s.extend(q.step_time_s for q in progress.points if q.step_time_s)
        del p.recent_step_times_s[:-STEP_TIMES_KEPT]
        history = launch.progress_history
        history.extend(
            (q.step, q.loss)
            for q in progress.points
            if q.loss is not None and health.finite(q.loss)
        )
        rewards = [(q.step, q.reward) for q in progress.points if health.finite(q.reward)]
        launch.reward_history.extend((s, r) for s, r in rewards if r is not None)
        p.reward = launch.reward_history[-1][1] if launch.reward_history else p.reward
        launch.validation_history.extend(progress.validation)
        kept_lists = (history, launch.validation_history, launch.reward_history)
        for kept in (*kept_lists, launch.accuracy_history):
            if len(kept) > HISTORY_MAX:  # the whole run at half the resolution, spikes kept
                kept[:] = reduce_per_column(kept, HISTORY_MAX // 4)
        return True

    def image_digest(self, text: str) -> None:
        """A registry image's digest, "resolved at start" in the record, from the job's own
        log once a pyxis or enroot line names it (said once)."""
        record = self.attempt.record
        if record is None or record.image_digest or not is_registry_ref(record.image):
            return
        digest = digest_from_log(text)
        if digest:
            self.attempt.record = record.model_copy(update={"image_digest": digest})
            self.tell({"move": "image_digest", "image": record.image, "digest": digest})

    def trackers(self, text: str, tracking: Tracking) -> None:
        """Where the run logs its metrics (a W&B page, a TensorBoard directory): said once."""
        launch = self.launch
        for url in run_links(text):
            if not self.watch.link_allowed(url):  # a job must not make the bot post any link
                log.warning(
                    "launch %s: not posting a link to %s (watch.link_hosts)", launch.id, url
                )
                continue
            if url not in launch.run_links:
                launch.run_links.append(url)
                tracker = "mlflow" if "/experiments/" in url else "wandb"
                self.tell({"move": "run_link", "tracker": tracker, "url": url})
        fw = framework(tracking.framework)
        for printed in fw.tensorboard_printed(text):
            where = fw.tensorboard_dir(printed, tracking, self.snap.directory)
            if where not in launch.tensorboard_dirs:
                launch.tensorboard_dirs.append(where)
                job = self.snap.job_id
                link = self.profile.tensorboard_url(log_dir=where, job_id=job, launch_id=launch.id)
                self.tell(
                    {
                        "move": "tensorboard",
                        "log_dir": where,
                        "job": job,
                        "url": link or "",
                        "host": self.profile.login.host,
                    }
                )

    def checkpoints(self) -> None:
        """Each saved step once: NeMo's ``-last`` copy (pretraining) or link (fine-tuning)
        of a step already announced is the same checkpoint under a second name."""
        tracking = self.attempt.tracking
        pattern = tracking.checkpoint_pattern if tracking is not None else ""
        steps = {
            int(m.group(1))
            for name in self.launch.checkpoints
            if pattern and (m := re.search(pattern, name)) and m.group(1)
        }
        for ckpt in self.snap.new_checkpoints:
            if ckpt.name not in self.launch.checkpoints and ckpt.step not in steps:
                self.launch.checkpoints.append(ckpt.name)
                if ckpt.size_bytes > 0:
                    self.launch.checkpoint_bytes[ckpt.name] = ckpt.size_bytes
                steps.add(ckpt.step)
                self.tell({"move": "checkpoint", "step": ckpt.step})

    def requeues(self) -> None:
        """Slurm's own requeue (node failure, --requeue, scontrol requeue): same job id, a new
        incarnation. Only ``sacct -D`` tells why the one before ended: a node failure is paged,
        any other requeue is said in the thread alone."""
        snap, attempt = self.snap, self.attempt
        if snap.restarts <= attempt.restarts:
            return
        acct = snap.acct
        if acct is None or acct.restarts < snap.restarts:
            return  # accounting not read or not caught up yet: sacct -D is read again next poll
        ended = acct.earlier[attempt.restarts : snap.restarts] or acct.earlier[-1:]
        attempt.restarts = snap.restarts
        failed = [r for r in ended if r.state.startswith("NODE_FAIL")]
        why = explain_pending(snap.queue.reason) if snap.queue is not None else None
        facts: dict[str, object] = {
            "move": "slurm_requeue",
            "job": snap.job_id,
            "restart": snap.restarts,
            "held": why.words if why is not None and why.held else "",  # runs once released
        }
        if not failed:
            self.tell({**facts, "before": ended[-1].state if ended else "REQUEUED"})
            return
        self.tell({**facts, "node_failure": True})
        nodes, job = failed[-1].nodelist, snap.job_id
        self.events += babysit.oncall(self.launch, "node_failure", nodes=nodes, job=job)

    def attach(self) -> None:
        tracking = self.attempt.tracking
        if self.snap.attach_ready and not self.attempt.attach_ready and tracking is not None:
            self.attempt.attach_ready = True
            if self.snap.attach_found and self.snap.attach_found != tracking.attach_path:
                tracking = tracking.model_copy(update={"attach_path": self.snap.attach_found})
                self.attempt.tracking = tracking
            command = framework(tracking.framework).attach_command(tracking) or ""
            facts = {"move": "attach_ready", "job": self.snap.job_id, "launch": self.launch.id}
            self.tell({**facts, "command": command})

    def started(self) -> None:
        """First sight of the job running (or already past it): say where, before anything else."""
        state, launch = self.snap.state, self.launch
        if launch.phase == Phase.RUNNING or not state or state in ("PENDING", "CONFIGURING"):
            return
        if state not in ("RUNNING", "COMPLETING") and not self.snap.log.path:
            return  # ended without ever being seen to run: the final message says it all
        nodes = self.snap.queue.nodelist if self.snap.queue else ""
        if not nodes and self.snap.acct is not None:
            nodes = self.snap.acct.latest.nodelist
        self.move(phases.running, phases.Facts(now=self.now, nodes=nodes))

    def state(self) -> None:
        state, attempt = self.snap.state, self.attempt
        if not state or state == attempt.slurm_state:
            return
        if is_terminal(state) and self.checkpoints_unread:
            return  # the end is taken at the next poll, with the checkpoints it lists
        if is_terminal(state) and self.snap.log.more:
            return  # the end is taken once the log is read to its end (its last step, its why)
        previous, attempt.slurm_state = attempt.slurm_state, state
        self.visible = True
        if state in ("RUNNING", "COMPLETING"):
            return
        if is_terminal(state):
            self.terminal(state)
        elif state == "PENDING" and previous in ("RUNNING", "COMPLETING"):
            self.move(phases.requeued, phases.Facts(job_id=self.snap.job_id))
        elif previous and state not in ("PENDING", "CONFIGURING"):
            self.tell({"move": "slurm_state", "state": state})

    def end(self, state: str) -> dict[str, object] | None:
        """The launch ends ``state``; a run that COMPLETED short of its total is resumed
        (None) or ends STOPPED_EARLY, never ✅ (the facts of why it stopped)."""
        why = babysit.early_stop_reason(self.launch) if state == "COMPLETED" else ""
        if not why:
            phases.ended(self.launch, phases.Facts(outcome=state))
            return {}
        events, stopped = babysit.on_stopped_early(self.launch, self.watch, why=why, now=self.now)
        self.events += events
        self.visible = True
        return stopped or None

    def accounted(self) -> None:
        """What Slurm's accounting says of the ended attempt: exit code, nodes, GPU-hours,
        and its own run time (it beats when the poller first saw the job running)."""
        attempt = self.attempt
        if self.snap.acct is None:
            return
        latest = self.snap.acct.latest
        attempt.exit_code = latest.exit_code
        attempt.node_list = latest.nodelist or attempt.node_list
        if self.snap.acct.gpu_hours > 0:  # ElapsedRaw x AllocTRES gres/gpu, per incarnation
            attempt.gpu_hours = self.snap.acct.gpu_hours
        try:
            ran_s = slurm_time_seconds(latest.elapsed)
        except ValueError:
            ran_s = 0
        if ran_s:
            attempt.started_at = min(attempt.started_at or self.now, self.now - ran_s)

    def terminal(self, state: str) -> None:
        attempt, launch = self.attempt, self.launch
        attempt.ended_at = self.now
        self.accounted()
        if state != "COMPLETED":
            events, retrying = babysit.on_failure(
                launch, self.watch, state=state, diagnosis=self.diagnosis, now=self.now
            )
            self.events += events
            self.visible = True
            if retrying:
                return
        stopped = self.end(state)
        if stopped is None:
            return  # resumed as a new attempt
        facts = babysit.closing_facts(launch, self.profile, self.now, state=state)
        if not launch.ending and not launch.detail:  # (a failure or a stop said it already)
            launch.ending = dict(facts)
        if stopped:
            facts["stopped"] = stopped
        if (
            state != "COMPLETED"
            and not launch.cancelled_by
            and not launch.attempts[-1].cause_key
            and attempt.tail.strip()
        ):
            facts["tail"] = attempt.tail.strip().splitlines()[-FAILURE_TAIL_LINES:]
        # The final line: Run again; a run left stopped early also goes on from its checkpoint.
        facts["buttons"] = ["resume", "run_again"] if stopped else ["run_again"]
        self.tell(facts)
        if state == "COMPLETED":  # recovered: close what was paged for it
            self.events += babysit.resolve_alerts(launch, state)
        if len(launch.progress_history) >= 2:
            self.events.append(Event("plot", launch.id))


def apply_snapshot(
    launch: Launch,
    snap: JobSnapshot,
    profile: ClusterProfile,
    watch: Watch | None = None,
    now: float | None = None,
    diagnosis: Diagnosis | None = None,
) -> list[Event]:
    """Edit ``launch`` for what ``snap`` shows; return the messages to post.

    ``diagnosis`` is what the evidence of a failed job showed (the poller gathers it
    when ``snap`` says the job ended other than COMPLETED)."""
    attempt = launch.attempt
    if attempt is None or attempt.job_id != snap.job_id:
        return []
    if launch.phase not in (Phase.SUBMITTED, Phase.RUNNING):
        return []
    clock = time.time() if now is None else now
    step = _Step(launch, snap, profile, watch or Watch(), clock, diagnosis)
    step.started()
    progressed = step.read_log()
    step.checkpoints()
    step.requeues()
    step.attach()
    step.state()
    step.events += babysit.pending_reason(launch, snap)
    step.events += babysit.check_hang(launch, step.watch, step.now)
    stale = step.now - launch.parent_rendered_at >= PARENT_REFRESH_S
    if step.visible or (progressed and stale):
        launch.parent_rendered_at = step.now
        step.events.append(Event("update", launch.id))
    return step.events
