"""Typed requests: what a command asks for, after parsing and checking.

Every model is frozen and checks its own fields with the same patterns the
parser uses, so a request read back from storage is as safe as a parsed one.
``to_text()`` gives the canonical command line; parsing it gives the same
request back. ``kind`` tells the requests apart when stored as JSON
(:data:`REQUEST_ADAPTER`).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from cluster.launching.parts import OVERRIDE_KEY_PATTERN
from cluster.launching.recipes import MODEL_PATTERN
from cluster.site.framework_registry import FrameworkName, Workload
from cluster.site.image_refs import is_registry_ref
from cluster.site.profile_fields import IMAGE_NAME_PATTERN
from commands.after_training import THEN_PATTERN
from commands.request_fields import (
    ClusterName,
    HelpTopic,
    Image,
    JobName,
    JobRef,
    Nodes,
    Override,
    Partition,
    SlurmTime,
)
from commands.schedule import AFTER_PATTERN, AT_PATTERN
from commands.values import (
    MAX_LOG_LINES,
)


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    command: ClassVar[str] = ""

    def to_text(self) -> str:
        """The canonical command line for this request."""
        raise NotImplementedError


def _pairs(**values: str | int | None) -> list[str]:
    return [f"{key}={value}" for key, value in values.items() if value is not None]


class _LaunchFields(_Request):
    cluster: ClusterName
    nodes: Nodes = 1
    partition: Partition = None
    time: SlurmTime = None
    name: JobName = None
    image: Image = None
    dry_run: bool = False
    over_budget: bool = False  # an admin launches past the GPU-hour budget
    at: str | None = Field(default=None, pattern=AT_PATTERN)  # not before (UTC)
    after: str | None = Field(default=None, pattern=AFTER_PATTERN)  # a launch or Slurm job
    after_any: bool = False  # go whatever the end of ``after`` (else: only if it completed)

    def _launch_pairs(self) -> list[str]:
        pairs = _pairs(
            cluster=self.cluster,
            nodes=self.nodes,
            partition=self.partition,
            time=self.time,
            name=self.name,
            image=self.image,
            at=self.at,
            after=self.after and f"{self.after}:{'any' if self.after_any else 'ok'}",
        )
        flags = [f"{key}=true" for key in ("dry_run", "over_budget") if getattr(self, key)]
        return [*pairs, *flags]


class TrainRequest(_LaunchFields):
    """``/train <workload> <model> [key=value ...]``: launch a recipe."""

    command: ClassVar[str] = "/train"
    kind: Literal["train"] = "train"
    workload: Workload
    model: str = Field(pattern=MODEL_PATTERN)
    framework: FrameworkName
    overrides: tuple[Override, ...] = ()
    start_from: str | None = Field(default=None, pattern=AFTER_PATTERN)  # from=: its checkpoint
    start_step: int | None = Field(default=None, ge=0)  # from=<job>@<step>: not the newest
    from_running: bool = False  # from= a launch that still runs, said on purpose
    then: str | None = Field(default=None, pattern=THEN_PATTERN)  # then=export / eval:<tasks>

    @model_validator(mode="after")
    def _check_overrides(self) -> TrainRequest:
        keys = [key for key, _ in self.overrides]
        if keys != sorted(set(keys)):
            raise ValueError("overrides must be sorted by key, each key once")
        return self

    def to_text(self) -> str:
        words = [self.command, self.workload, self.model, f"framework={self.framework}"]
        words += self._launch_pairs()
        step = "" if self.start_step is None else f"@{self.start_step}"
        words += [f"from={self.start_from}{step}"] if self.start_from else []
        words += ["from_running=yes"] if self.start_from and self.from_running else []
        words += [f"then={self.then}"] if self.then else []
        words += [f"{key}={value}" for key, value in self.overrides]
        return " ".join(words)


class SweepRequest(_Request):
    """``/train ...`` with a comma list (or ``seeds=N``): one launch per combination.
    ``axes`` are the keys that vary with their values, in product order; ``seed_key``
    is the recipe's seed override when ``seeds=N`` was given (its axis is last)."""

    command: ClassVar[str] = "/train"
    kind: Literal["sweep"] = "sweep"
    members: tuple[TrainRequest, ...] = Field(min_length=1)
    axes: tuple[tuple[Annotated[str, Field(pattern=OVERRIDE_KEY_PATTERN)], tuple[str, ...]], ...]
    seed_key: str | None = None

    @property
    def dry_run(self) -> bool:
        return self.members[0].dry_run

    @property
    def cluster(self) -> str:
        return self.members[0].cluster

    def values_of(self, index: int) -> tuple[tuple[str, str], ...]:
        """The varied values of member ``index`` (its place in the product)."""
        chosen = []
        for key, values in reversed(self.axes):
            index, at = divmod(index, len(values))
            chosen.append((key, values[at]))
        return tuple(reversed(chosen))

    def to_text(self) -> str:
        lists = {key: ",".join(values) for key, values in self.axes}
        words = []
        for word in self.members[0].to_text().split(" "):
            key = word.split("=", 1)[0]
            if key == self.seed_key:
                words.append(f"seeds={len(dict(self.axes)[key])}")
            elif key in lists:
                words.append(f"{key}={lists[key]}")
            else:
                words.append(word)
        return " ".join(words)


class InteractiveRequest(_LaunchFields):
    """``/train interactive [nodes=N] [cluster=C] ...``: an interactive NeMo-RL allocation."""

    command: ClassVar[str] = "/train"
    kind: Literal["interactive"] = "interactive"

    def to_text(self) -> str:
        return " ".join([self.command, "interactive", *self._launch_pairs()])


class ShellRequest(_Request):
    """``/train interactive node=<n> [cluster=C]``: the guide's ``nemorlinteractive <n>``, a
    shell on node ``n`` (0-based) of the person's running interactive job."""

    command: ClassVar[str] = "/train"
    kind: Literal["shell"] = "shell"
    node: int = Field(ge=0, le=4095)
    cluster: ClusterName | None = None

    def to_text(self) -> str:
        return " ".join(
            [self.command, "interactive", *_pairs(node=self.node, cluster=self.cluster)]
        )


def _check_registry_ref(value: str | None) -> str | None:
    if value is None or is_registry_ref(value):
        return value
    raise ValueError("must be a registry reference (nvcr.io/nvidia/nemo:26.02, docker://...)")


class ImagesRequest(_Request):
    """``/images [cluster=C]``: each cluster's images and the guide's prebuilt ones;
    ``/images fetch <framework> [cluster=C]``: copy the guide's prebuilt image;
    ``/images import <reference> as <name> [cluster=C]``: convert a registry image."""

    command: ClassVar[str] = "/images"
    kind: Literal["images"] = "images"
    cluster: ClusterName | None = None
    action: Literal["list", "fetch", "import"] = "list"
    framework: Annotated[str | None, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")] = None
    source: Annotated[str | None, AfterValidator(_check_registry_ref)] = None
    name: Annotated[str | None, Field(pattern=IMAGE_NAME_PATTERN)] = None

    @model_validator(mode="after")
    def _complete(self) -> ImagesRequest:
        if self.action == "fetch" and (self.framework is None or self.cluster is None):
            raise ValueError("/images fetch needs a framework and a cluster")
        if self.action == "import" and None in (self.source, self.name, self.cluster):
            raise ValueError("/images import needs a reference, a name and a cluster")
        if self.name is not None and ".." in self.name:
            raise ValueError("an image name has no '..'")
        return self

    def to_text(self) -> str:
        words: list[str] = [self.command]
        if self.action == "fetch":
            words += ["fetch", str(self.framework)]
        elif self.action == "import":
            words += ["import", str(self.source), "as", str(self.name)]
        return " ".join([*words, *_pairs(cluster=self.cluster)])


class _OneJob(_Request):
    """A command about one job: ``/<command> <job>``."""

    job: JobRef

    def to_text(self) -> str:
        return f"{self.command} {self.job.to_text()}"


class AttachRequest(_OneJob):
    """``/attach <job>``: how to attach to an interactive job."""

    command: ClassVar[str] = "/attach"
    kind: Literal["attach"] = "attach"


class CancelRequest(_OneJob):
    """``/cancel <job>``: cancel a job (after confirmation)."""

    command: ClassVar[str] = "/cancel"
    kind: Literal["cancel"] = "cancel"


class WatchRequest(_OneJob):
    """``/watch <job>``: get a launch's events by DM (by your own preferences)."""

    command: ClassVar[str] = "/watch"
    kind: Literal["watch"] = "watch"


class UnwatchRequest(_OneJob):
    """``/unwatch <job>``: stop getting a launch's events by DM."""

    command: ClassVar[str] = "/unwatch"
    kind: Literal["unwatch"] = "unwatch"


class CheckpointsRequest(_OneJob):
    """``/checkpoints <job>``: a launch's complete checkpoints, with what to do with each."""

    command: ClassVar[str] = "/checkpoints"
    kind: Literal["checkpoints"] = "checkpoints"
    keep: int = Field(default=1, ge=1, le=100)  # Delete all but the best ``keep`` and the last

    def to_text(self) -> str:
        return super().to_text() + ("" if self.keep == 1 else f" keep={self.keep}")


class LogsRequest(_Request):
    """``/logs <job> [lines=N]`` or ``/logs <job> plot``. ``lines=None`` means the default."""

    command: ClassVar[str] = "/logs"
    kind: Literal["logs"] = "logs"
    job: JobRef
    lines: int | None = Field(default=None, ge=1, le=MAX_LOG_LINES)
    plot: bool = False

    @model_validator(mode="after")
    def _check_plot(self) -> LogsRequest:
        if self.plot and self.lines is not None:
            raise ValueError("plot and lines do not go together")
        return self

    def to_text(self) -> str:
        words = [self.command, self.job.to_text()]
        words += ["plot"] if self.plot else _pairs(lines=self.lines)
        return " ".join(words)


class JobsRequest(_Request):
    """``/jobs [all] [history [days=N]] [cluster=C]``: your active launches, or everyone's;
    with ``history``, the finished ones of the last N days (7); ``/jobs watching``: the
    launches you watch."""

    command: ClassVar[str] = "/jobs"
    kind: Literal["jobs"] = "jobs"
    all_users: bool = False
    cluster: ClusterName | None = None
    history: bool = False
    days: int = Field(default=7, ge=1, le=400)
    watching: bool = False

    def to_text(self) -> str:
        if self.watching:
            return f"{self.command} watching"
        words = [self.command, *(["all"] if self.all_users else [])]
        if self.history:
            words += ["history", f"days={self.days}"]
        return " ".join(words + _pairs(cluster=self.cluster))


class ClustersRequest(_Request):
    """``/clusters [cluster=C]``: partitions, free nodes and queue per cluster."""

    command: ClassVar[str] = "/clusters"
    kind: Literal["clusters"] = "clusters"
    cluster: ClusterName | None = None

    def to_text(self) -> str:
        return " ".join([self.command, *_pairs(cluster=self.cluster)])


class UsageRequest(_Request):
    """``/usage``: GPU-hours of a person, a team (Slack user group) or a cluster over a
    window (``week`` and ``month`` so far, or the last ``days``); ``csv`` as a file too."""

    command: ClassVar[str] = "/usage"
    kind: Literal["usage"] = "usage"
    scope: Literal["person", "team", "cluster"] = "person"
    target: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    window: Literal["week", "month", "days"] = "week"
    days: int = Field(default=0, ge=0, le=366)
    csv: bool = False

    def to_text(self) -> str:
        who = {"person": f"@{self.target}", "team": f"team={self.target}"}.get(
            self.scope, f"cluster={self.target}"
        )
        when = f"days={self.days}" if self.window == "days" else self.window
        return " ".join([self.command, who, when] + (["csv=true"] if self.csv else []))


class HelpRequest(_Request):
    """``/train help [topic]``."""

    command: ClassVar[str] = "/train"
    kind: Literal["help"] = "help"
    topic: HelpTopic | None = None

    def to_text(self) -> str:
        return " ".join([self.command, "help", *([self.topic] if self.topic else [])])


class RecipesRequest(_Request):
    """``/train recipes [workload]``: the recipe catalog."""

    command: ClassVar[str] = "/train"
    kind: Literal["recipes"] = "recipes"
    workload: Workload | None = None

    def to_text(self) -> str:
        return " ".join([self.command, "recipes", *([self.workload] if self.workload else [])])


Request = Annotated[
    TrainRequest
    | SweepRequest
    | InteractiveRequest
    | ShellRequest
    | ImagesRequest
    | AttachRequest
    | CancelRequest
    | WatchRequest
    | UnwatchRequest
    | CheckpointsRequest
    | LogsRequest
    | JobsRequest
    | ClustersRequest
    | HelpRequest
    | RecipesRequest
    | UsageRequest,
    Field(discriminator="kind"),
]
REQUEST_ADAPTER: TypeAdapter[Request] = TypeAdapter(Request)
