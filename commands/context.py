"""What the parser knows besides the text: who asks, and the configured world."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cluster.launching.recipes import DEFAULT_CATALOG, RecipeCatalog
from cluster.site.profiles import ClusterProfile
from commands.errors import CommandError
from commands.policy import Policy
from commands.suggest import did_you_mean, join_names, quote


class User(BaseModel):
    """The person typing: Slack user id (or console name) and their user group ids."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str = ""
    groups: frozenset[str] = frozenset()
    tz: str = ""  # IANA time zone (Slack's users.info ``tz``); "": this machine's zone


class CommandContext(BaseModel):
    """Clusters (in config order), the recipe catalog and the policy.

    ``default_cluster`` is used when ``cluster=`` is left out; without it, the
    first cluster is the default.
    """

    model_config = ConfigDict(frozen=True)

    clusters: dict[str, ClusterProfile]
    catalog: RecipeCatalog = DEFAULT_CATALOG
    policy: Policy = Field(default_factory=Policy)
    default_cluster: str | None = None

    @model_validator(mode="after")
    def _check_default(self) -> CommandContext:
        if self.default_cluster is not None and self.default_cluster not in self.clusters:
            raise ValueError(f"default_cluster {self.default_cluster!r} is not a cluster")
        return self

    @property
    def cluster_names(self) -> list[str]:
        return list(self.clusters)

    def default_profile(self) -> ClusterProfile:
        if not self.clusters:
            raise CommandError("No clusters are configured. Ask a trainbot admin to add one.")
        name = self.default_cluster or next(iter(self.clusters))
        return self.clusters[name]

    def profile(self, raw: str | None) -> ClusterProfile:
        """The named cluster (the default when ``raw`` is None), or CommandError."""
        if raw is None:
            return self.default_profile()
        found = self.clusters.get(raw.lower())
        if found is not None:
            return found
        if not self.clusters:
            self.default_profile()
        raise CommandError(
            f"Unknown cluster {quote(raw)}. Known clusters: {join_names(self.cluster_names)}."
            f"{did_you_mean(raw, self.cluster_names)}",
            field="cluster",
        )
