"""The config file's sections about watching runs and telling people: ``alerts``
(where on-call hears of trouble), ``report`` (the usage report), ``watch`` (retries,
hangs, links, and a run's ``health``) and ``delivery`` (how long what cannot be
delivered is tried)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.settings.cron import cron_trigger
from cluster.site.profile_fields import EnvSecret

LINK_HOST_PATTERN = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class Webhook(BaseModel):
    """A PagerDuty Events API v2 endpoint for pages."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    url: str = Field(pattern=r"^https?://[^\s]+$")
    """The endpoint pages are posted to (https), e.g. `https://events.pagerduty.com/v2/enqueue`."""
    routing_key: EnvSecret | None = None
    """The integration's routing key, from the bot's environment (`{env: NAME}`)."""


class Alerts(BaseModel):
    """Where on-call hears about trouble."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    oncall_channel: str | None = Field(default=None, pattern=r"^[CG][A-Z0-9]{2,}$")
    """The Slack channel id (`C...` or `G...`) where pages are posted; the bot must be invited
    there."""
    oncall_usergroup: str | None = Field(default=None, pattern=r"^S[A-Z0-9]{2,}$")
    """The Slack user group id (`S...`) mentioned in pages (paid Slack plans only)."""
    webhook: Webhook | None = None
    """A paging service (PagerDuty Events API v2) that gets each page too; null: none."""


class Report(BaseModel):
    """The usage report posted to ``channel`` on ``cron`` (crontab, UTC; six fields put
    seconds first), covering the ``days`` before it; once across all bot processes."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    channel: str = Field(pattern=r"^[CG][A-Z0-9]{2,}$")
    """The Slack channel id (`C...` or `G...`) the report is posted to; the bot must be invited
    there."""
    cron: str = "0 9 * * mon"
    """When: a crontab line in UTC, read as cron reads it (`0 9 * * 1`: Mondays 09:00; weekdays 0
    and 7 are Sunday); a sixth field in front gives seconds."""
    days: int = Field(default=7, ge=1, le=92)
    """The days before each report that it covers."""
    top: int = Field(default=5, ge=1, le=50)
    """How many of the top users it names."""

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


class HealthRules(BaseModel):
    """A running run's health read from its progress lines (docs/health.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    nan_action: Literal["stop", "flag"] = "stop"
    """A NaN or inf training loss: `stop` cancels the run (final, never retried), `flag` tells the
    owner and leaves it running."""
    nan_action_clusters: dict[str, Literal["stop", "flag"]] = Field(default_factory=dict)
    """`nan_action` per cluster, by name, e.g. `{a3m: flag}`."""
    nan_action_accounts: dict[str, Literal["stop", "flag"]] = Field(default_factory=dict)
    """`nan_action` per team, by the Slurm account a launch is charged to (`policy.accounts`); a
    team's wins over its cluster's."""
    spike_factor: float = Field(default=3.0, gt=1, le=1000)
    """A loss above this many times the median of the last `spike_window` losses is a spike."""
    spike_window: int = Field(default=20, ge=3, le=1000)
    """Losses whose median a spike is measured against."""
    spike_min_points: int = Field(default=5, ge=2, le=1000)
    """Losses seen before spikes are looked for. The spike rule is off for a run that reports a
    reward (RL: its loss is a clipped policy-gradient term near zero, of either sign) and while
    any loss in the window is zero or below."""
    reward_window: int = Field(default=10, ge=2, le=1000)
    """RL runs: the median reward of the last this many steps is compared with its best."""
    reward_collapse: float = Field(default=0.5, gt=0, lt=1)
    """RL runs: a median reward under (1 - this) x its best such median is a collapse (said
    once)."""
    reward_flat_steps: int = Field(default=20, ge=3, le=10_000)
    """RL runs: this many steps in a row with the same reward (all 0 or all 1: no learning signal)
    is flat (said once)."""
    val_rising: int = Field(default=3, ge=2, le=100)
    """Validation loss higher at this many validations in a row while the training loss fell: one
    note."""
    slow_factor: float = Field(default=2.0, gt=1, le=1000)
    """Step time above this many times the run's median is slow."""
    slow_steps: int = Field(default=3, ge=1, le=10_000)
    """Slow steps in a row before a warning (and one when it recovers)."""
    slow_min_points: int = Field(default=5, ge=2, le=1000)
    """Step times seen before slow steps are looked for."""
    gpu_sample_s: float = Field(default=300.0, ge=0, le=86400)
    """Seconds between samples of running jobs' GPU utilisation and memory, on their nodes; 0: not
    sampled."""
    gpu_sample_clusters: dict[str, Annotated[float, Field(ge=0, le=86400)]] = Field(
        default_factory=dict
    )
    """`gpu_sample_s` per cluster, by name, e.g. `{a3h: 120}`."""
    idle_util_pct: float = Field(default=10.0, ge=0, le=100)
    """A GPU at or under this utilisation (percent) is idle."""
    idle_window_s: float = Field(default=900.0, ge=0, le=7 * 86400)
    """GPUs idle this long: the owner is warned once."""

    def nan_action_for(self, cluster: str, account: str = "") -> str:
        if account and account in self.nan_action_accounts:
            return self.nan_action_accounts[account]
        return self.nan_action_clusters.get(cluster, self.nan_action)

    def gpu_sample_for(self, cluster: str) -> float:
        return self.gpu_sample_clusters.get(cluster, self.gpu_sample_s)


class Watch(BaseModel):
    """How runs are babysat: automatic retries and hang detection."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_attempts: int = Field(default=3, ge=1, le=20)
    """Attempts per launch, the first included, for known transient failures."""
    retry_backoff_s: float = Field(default=30.0, ge=0, le=3600)
    """Seconds to wait before attempt N: `retry_backoff_s` x (N - 1)."""
    hang_min_s: float = Field(default=600.0, gt=0, le=7 * 86400)
    """A RUNNING job with no new progress line for the larger of this and `hang_step_factor` x its
    step time is a silent hang (on-call is paged)."""
    hang_step_factor: float = Field(default=10.0, gt=0, le=1000)
    """Times the run's step time that counts as a silent hang (see `hang_min_s`)."""
    startup_max_s: float = Field(default=7200.0, gt=0, le=7 * 86400)
    """Before a job's first step, start-up (image import, model download, Ray, vLLM: often over 10
    minutes on 70B runs) counts as progress while its log grows, `hang_min_s` being the longest
    silence; a start-up longer than this is a hang however much it prints."""
    evidence_reread_s: float = Field(default=5.0, ge=0, le=600)
    """A failed job whose files name no known cause is read again this much later (shared file
    systems lag) before its cause is called unknown."""
    link_hosts: tuple[Annotated[str, Field(pattern=LINK_HOST_PATTERN)], ...] = ("wandb.ai",)
    """Hosts (and their subdomains) whose https links trainbot posts from job output, such as W&B
    or MLflow run pages; add your own W&B or MLflow server's host."""
    resume_stopped_early: Literal["never", "time_budget", "always"] = "time_budget"
    """A run that ends COMPLETED short of its total because it stopped early: `time_budget`
    resumes it from its newest checkpoint when it stopped on its own time budget (NeMo-RL's
    `checkpoint_must_save_by`, Megatron's `exit_duration_in_mins`, Lightning's `max_time`),
    `always` whatever made it stop short, `never` ends it STOPPED_EARLY. A resume needs a
    checkpoint saved and progress made in the attempt."""
    max_resumes: int = Field(default=20, ge=0, le=1000)
    """Resumes of a run that stopped early, at most, per launch."""
    health: HealthRules = Field(default_factory=HealthRules)
    """A running run's health checks: NaN losses, spikes, slow steps, idle GPUs (docs/health.md)."""

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

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    retry_for_h: float = Field(default=24.0, ge=1, le=24 * 30)
    """Hours from its first failure that an undelivered message or failing queue entry is tried
    again, before it is given up for good."""
    dead_letter_retry_max_s: float = Field(default=1800.0, ge=10, le=86400)
    """The longest wait in seconds between two tries of a dead letter (the waits grow to it)."""
