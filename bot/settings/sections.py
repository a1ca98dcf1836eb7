"""The config file's sections about watching runs and telling people: ``alerts``
(where on-call hears of trouble), ``report`` (the usage report), ``watch`` (retries,
hangs, links, and a run's ``health``) and ``delivery`` (how long what cannot be
delivered is tried)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.settings.cron import cron_trigger
from cluster.profile_fields import EnvSecret

LINK_HOST_PATTERN = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class Webhook(BaseModel):
    """A PagerDuty Events API v2 endpoint for pages."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=r"^https?://[^\s]+$")
    routing_key: EnvSecret | None = None


class Alerts(BaseModel):
    """Where on-call hears about trouble."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    oncall_channel: str | None = Field(default=None, pattern=r"^[CG][A-Z0-9]{2,}$")
    oncall_usergroup: str | None = Field(default=None, pattern=r"^S[A-Z0-9]{2,}$")
    webhook: Webhook | None = None


class Report(BaseModel):
    """The usage report posted to ``channel`` on ``cron`` (crontab, UTC; six fields put
    seconds first), covering the ``days`` before it; once across all bot processes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    channel: str = Field(pattern=r"^[CG][A-Z0-9]{2,}$")
    cron: str = "0 9 * * mon"
    days: int = Field(default=7, ge=1, le=92)
    top: int = Field(default=5, ge=1, le=50)

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, value: str) -> str:
        try:
            cron_trigger(value)
        except ValueError as exc:
            raise ValueError(
                f"not a crontab schedule ({exc}); e.g. '0 9 * * mon' (Mondays 09:00 UTC)"
            ) from None
        return value


class Health(BaseModel):
    """A running run's health read from its progress lines (docs/health.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A NaN or inf training loss: "stop" cancels the run (final, never retried), "flag"
    # tells the owner and leaves it running; per cluster in nan_action_clusters.
    nan_action: Literal["stop", "flag"] = "stop"
    nan_action_clusters: dict[str, Literal["stop", "flag"]] = Field(default_factory=dict)
    # per team, by the Slurm account a launch is charged to (policy.accounts); a team's
    # rule wins over its cluster's
    nan_action_accounts: dict[str, Literal["stop", "flag"]] = Field(default_factory=dict)
    # A loss above spike_factor x the median of the last spike_window losses is a spike
    # (once the run has spike_min_points of them). Not for a run that reports a reward (RL:
    # its loss is a clipped policy-gradient term near zero, of either sign), nor while any
    # loss in the window is zero or below.
    spike_factor: float = Field(default=3.0, gt=1, le=1000)
    spike_window: int = Field(default=20, ge=3, le=1000)
    spike_min_points: int = Field(default=5, ge=2, le=1000)
    # RL runs (a reward per step): the median reward of the last reward_window steps under
    # (1 - reward_collapse) x its best such median is a collapse; reward_flat_steps steps in
    # a row with the same reward (all 0 or all 1: no learning signal) is flat.
    reward_window: int = Field(default=10, ge=2, le=1000)
    reward_collapse: float = Field(default=0.5, gt=0, lt=1)
    reward_flat_steps: int = Field(default=20, ge=3, le=10_000)
    # Validation loss rising at val_rising validations in a row while training loss falls.
    val_rising: int = Field(default=3, ge=2, le=100)
    # Step time above slow_factor x the run's median for slow_steps steps in a row.
    slow_factor: float = Field(default=2.0, gt=1, le=1000)
    slow_steps: int = Field(default=3, ge=1, le=10_000)
    slow_min_points: int = Field(default=5, ge=2, le=1000)
    # GPU utilisation and memory of running jobs, sampled on their nodes every gpu_sample_s
    # (per cluster in gpu_sample_clusters; 0: not sampled). GPUs at or under idle_util_pct
    # busy for idle_window_s are idle: the owner is warned once.
    gpu_sample_s: float = Field(default=300.0, ge=0, le=86400)
    gpu_sample_clusters: dict[str, Annotated[float, Field(ge=0, le=86400)]] = Field(
        default_factory=dict
    )
    idle_util_pct: float = Field(default=10.0, ge=0, le=100)
    idle_window_s: float = Field(default=900.0, ge=0, le=7 * 86400)

    def nan_action_for(self, cluster: str, account: str = "") -> str:
        if account and account in self.nan_action_accounts:
            return self.nan_action_accounts[account]
        return self.nan_action_clusters.get(cluster, self.nan_action)

    def gpu_sample_for(self, cluster: str) -> float:
        return self.gpu_sample_clusters.get(cluster, self.gpu_sample_s)


class Watch(BaseModel):
    """How runs are babysat: automatic retries and hang detection."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=20)
    retry_backoff_s: float = Field(default=30.0, ge=0, le=3600)
    hang_min_s: float = Field(default=600.0, gt=0, le=7 * 86400)
    hang_step_factor: float = Field(default=10.0, gt=0, le=1000)
    # Before a job's first step, start-up (image import, model download, Ray, vLLM: often
    # over 10 minutes on 70B runs) counts as progress while its log grows: hang_min_s is
    # then the longest silence. A start-up longer than this is called a hang however much
    # it prints.
    startup_max_s: float = Field(default=7200.0, gt=0, le=7 * 86400)
    # A failed job whose files name no known cause is read again this much later
    # (shared file systems lag) before trainbot says the cause is unknown.
    evidence_reread_s: float = Field(default=5.0, ge=0, le=600)
    # Hosts whose links trainbot posts from job output (W&B run pages): a link to any
    # other host (or a subdomain of none of these) is not posted; a job writes its log.
    link_hosts: tuple[Annotated[str, Field(pattern=LINK_HOST_PATTERN)], ...] = ("wandb.ai",)
    # A run that ends COMPLETED short of its total because it stopped early on purpose:
    # "time_budget" resumes it from its newest checkpoint when it stopped on its own time
    # budget (NeMo-RL's checkpoint_must_save_by, Megatron's exit_duration_in_mins),
    # "always" whatever made it stop short, "never" ends it STOPPED_EARLY. A resume needs a
    # checkpoint newer than the attempt's start; at most max_resumes per launch.
    resume_stopped_early: Literal["never", "time_budget", "always"] = "time_budget"
    max_resumes: int = Field(default=20, ge=0, le=1000)
    health: Health = Field(default_factory=Health)

    def link_allowed(self, url: str) -> bool:
        """Whether ``url`` is https to one of ``link_hosts`` (or a subdomain of one)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme != "https" or parts.username or parts.password or not host:
            return False
        return any(host == h or host.endswith("." + h) for h in self.link_hosts)

    def hang_after_s(self, step_time_s: float | None) -> float:
        """No new progress line for this long means a silent hang (given the median step time)."""
        return max(self.hang_min_s, self.hang_step_factor * (step_time_s or 0.0))


class Delivery(BaseModel):
    """How long what cannot be delivered is tried: a message the notifier could not post
    (Slack or PagerDuty down, a channel that refuses the bot) and a queue entry that
    kept failing inside trainbot. Past ``max_tries`` they are dead letters, tried again
    less often (at most ``dead_letter_retry_max_s`` apart) until ``retry_for_h`` after
    their first failure; then given up for good."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retry_for_h: float = Field(default=24.0, ge=1, le=24 * 30)
    dead_letter_retry_max_s: float = Field(default=1800.0, ge=10, le=86400)
