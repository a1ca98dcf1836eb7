"""Cluster profiles: where a cluster's login node is and how jobs run there.

A profile is one entry under ``clusters:`` in the config file. A cluster
*type* names the machine and its GPUs per node (:data:`TYPE_DEFAULTS`; a
profile may override ``gpus_per_node``). The NCCL set-up and the container
flags are the launchers' business: trainbot passes the type to them
(``run.py --slurm-type``, ``launch.sh --cluster_type``), as a person would.

Paths on the login node are strings, absolute or starting with ``~/``, made of
characters that need no shell quoting. Paths on the bot's machine (the SSH key
and known_hosts) are :class:`pathlib.Path`.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from cluster.frameworks.registry import frameworks
from cluster.remote import join_remote
from cluster.sbatch import JobShape

ClusterType = Literal["hcc-a3m", "hcc-a3u", "hcc-a4", "hcc-a3h"]

CLUSTER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
IMAGE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,31}$"
SLURM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_REMOTE_PATH_RE = re.compile(r"(~|/)(/?[A-Za-z0-9._+@-]+)*/?")
_ATTACH_FIELDS = ("host", "port", "user", "job_id", "cluster")
_TENSORBOARD_FIELDS = ("log_dir", "job_id", "launch_id")
_NULLABLE = ("account", "time_limit", "attach_url_template", "tensorboard_url_template")


def check_remote_path(value: str) -> str:
    """A path on the login node: absolute or ``~/...``, safe characters, no ``..``."""
    if value == "~":
        return value
    if not value.startswith(("/", "~/")):
        raise ValueError(f"must be absolute or start with '~/' (got {value!r})")
    if not _REMOTE_PATH_RE.fullmatch(value):
        raise ValueError(f"may contain only letters, digits and . _ + @ - / (got {value!r})")
    if ".." in value.split("/"):
        raise ValueError(f"must not contain '..' (got {value!r})")
    return value.rstrip("/") if value not in ("/", "~/") else value


RemotePath = Annotated[str, AfterValidator(check_remote_path)]

_SLURM_TIME_RE = re.compile(
    r"(?:(?P<days>[0-9]{1,3})-(?P<dh>[0-9]{1,2})(?::(?P<dm>[0-9]{1,2})(?::(?P<ds>[0-9]{1,2}))?)?)"
    r"|(?:(?P<h>[0-9]{1,2}):(?P<m>[0-9]{1,2}):(?P<s>[0-9]{1,2}))"
    r"|(?:(?P<mm>[0-9]{1,6})(?::(?P<ss>[0-9]{1,2}))?)"
)
SLURM_TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
MAX_TIME_S = 365 * 86400


def slurm_time_seconds(value: str) -> int:
    """Seconds in a Slurm time limit (``--time``), or ValueError with a short reason.

    Accepts Slurm's own formats: minutes, minutes:seconds, hours:minutes:seconds,
    days-hours, days-hours:minutes and days-hours:minutes:seconds. Zero and
    "UNLIMITED" are refused: every launch gets a limit.
    """
    match = _SLURM_TIME_RE.fullmatch(value)
    if match is None:
        raise ValueError("not a Slurm time")
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "days" in g:
        days, hours, minutes, seconds = g["days"], g["dh"], g.get("dm", 0), g.get("ds", 0)
    elif "h" in g:
        days, hours, minutes, seconds = 0, g["h"], g["m"], g["s"]
    else:
        days, hours, minutes, seconds = 0, 0, g["mm"], g.get("ss", 0)
    if "days" in g and hours >= 24:
        raise ValueError("hours after 'D-' must be 0 to 23")
    if minutes >= 60 and "mm" not in g:
        raise ValueError("minutes must be 0 to 59")
    if seconds >= 60:
        raise ValueError("seconds must be 0 to 59")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError("zero means no limit; give a positive time")
    if total > MAX_TIME_S:
        raise ValueError("more than 365 days")
    return total


class TypeDefaults(BaseModel):
    """What a cluster type implies; see FIELD_GUIDE section 2."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str
    gpus_per_node: int = 8


TYPE_DEFAULTS: dict[ClusterType, TypeDefaults] = {
    "hcc-a3m": TypeDefaults(machine="A3 Mega (H100, TCPXO)"),
    "hcc-a3u": TypeDefaults(machine="A3 Ultra (H200, RDMA)"),
    "hcc-a4": TypeDefaults(machine="A4 (B200, RDMA)"),
    "hcc-a3h": TypeDefaults(machine="A3 High (H100)"),
}


CLUSTER_USER_PATTERN = r"^[a-z_][a-z0-9_.-]{0,31}$"
ClusterUser = Annotated[str, Field(pattern=CLUSTER_USER_PATTERN)]


class LoginNode(BaseModel):
    """How the bot reaches the cluster's login node over SSH.

    ``user`` is the shared account. ``user_ca_key_file`` is the private key of an
    SSH certificate authority the login node's sshd trusts (``TrustedUserCAKeys``):
    with it, the bot logs in as a person (see :class:`Identity`) with a certificate
    it signs for that one username, valid for ``cert_ttl_s``. A login with no
    ``key_file`` uses such a certificate for ``user`` too.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
    port: int = Field(default=22, ge=1, le=65535)
    user: ClusterUser
    key_file: Path | None = None
    known_hosts_file: Path | None = None
    user_ca_key_file: Path | None = None
    cert_ttl_s: int = Field(default=300, ge=60, le=86400)
    # Not in the config: the key id of the certificates signed for this login, naming
    # the person and what for (set by :meth:`as_user`); sshd logs it with each login.
    _key_id: str = PrivateAttr(default="")

    @property
    def key_id(self) -> str:
        return self._key_id or f"trainbot:-:{self.user}:-"

    def as_user(self, user: str, key_id: str = "") -> LoginNode:
        """The same login node, reached as ``user`` with a certificate (no key file)
        whose key id is ``key_id`` (``trainbot:<person>:<user>:<launch or purpose>``)."""
        if user == self.user:
            return self
        login = self.model_copy(update={"user": user, "key_file": None})
        login._key_id = key_id
        return login


DOMAIN_PATTERN = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.){1,8}[a-z]{2,63}$"
# Never a person's account, whatever an email says (the shared account is refused too).
RESERVED_USERS = frozenset({"root"})


def cert_key_id(person: str, user: str, what: str) -> str:
    """A certificate's key id: ``trainbot:<person>:<user>:<what>`` (the Slack user id or
    console name, the Unix user, the launch id or purpose), safe characters only."""

    def part(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._@+-]", "", text)[:80] or "-"

    return f"trainbot:{part(person)}:{part(user)}:{part(what)}"


class Identity(BaseModel):
    """Whose Unix user a launch runs as on this cluster.

    ``users`` maps a Slack user id (or a console name) to a cluster username;
    ``from_email`` also takes the local part of the person's Slack profile email
    (``users.info``) when ``users`` has no entry, but only from an email Slack has
    confirmed, in one of ``email_domains`` (required with ``from_email``), and never a
    name ``users`` gives someone else, root or the shared account (the bot also asks
    the login node that the name is a person's account: see
    :func:`cluster.accounts.check_person`). A person neither names is refused
    (``unmapped: refuse``, the default) or runs as the shared login account
    (``unmapped: shared``). Needs ``login.user_ca_key_file``.

    ``org_secrets`` names the ``job_secrets`` given as ``{env: NAME}`` (the
    organisation's, held by the bot) that people's jobs get; every other ``{env: ...}``
    secret is withheld from them (a person's job could read it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    users: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9._@-]{1,80}$")], ClusterUser] = Field(
        default_factory=dict
    )
    from_email: bool = False
    email_domains: tuple[Annotated[str, Field(pattern=DOMAIN_PATTERN)], ...] = ()
    unmapped: Literal["refuse", "shared"] = "refuse"
    org_secrets: tuple[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], ...] = ()

    @model_validator(mode="after")
    def _email_needs_domains(self) -> Identity:
        if self.from_email and not self.email_domains:
            raise ValueError(
                "from_email: true needs email_domains, the email domains whose addresses name "
                "your people (e.g. email_domains: [example.com]); without it anyone could "
                "set an email such as alice@elsewhere.example and run as alice"
            )
        return self

    def username_for(self, user_id: str, email: str | None = None, shared: str = "") -> str | None:
        """The cluster username for a person, or None when nothing maps them. ``email``
        must be one Slack has confirmed; ``shared`` is the shared login account."""
        return self.resolve(user_id, email, shared)[0]

    def resolve(
        self, user_id: str, email: str | None = None, shared: str = ""
    ) -> tuple[str | None, str]:
        """The cluster username for a person, or None and why not ("": no email to go by)."""
        if user_id in self.users:
            return self.users[user_id], ""
        if not self.from_email or not email:
            return None, ""
        local, at, domain = email.strip().lower().rpartition("@")
        if not at or not local:
            return None, f"your Slack profile's email ({email}) is not an email address"
        if domain not in self.email_domains:
            return None, (
                f"your Slack profile's email is in {domain}, not in {', '.join(self.email_domains)}"
            )
        if not re.fullmatch(CLUSTER_USER_PATTERN, local):
            return None, f"the name in your Slack profile's email ({local}) is not a username"
        if local in RESERVED_USERS or local == shared:
            return None, f"your Slack profile's email names {local}, which is not a person's user"
        if local in self.users.values():
            return None, f"your Slack profile's email names {local}, who is someone else here"
        return local, ""


class EnvSecret(BaseModel):
    """A secret taken from the bot's environment variable ``env``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str = Field(pattern=ENV_NAME_PATTERN)


class SecretRef(BaseModel):
    """Where a job secret comes from: ``{env: NAME}`` (the bot's environment) or
    ``{file: PATH}`` (a file on the login node, read when the job starts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    file: RemotePath | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: NAME or file: PATH")
        return self


def check_seed_source(value: str) -> str:
    """A tokenizer file's source: an http(s) URL or a path on the login node."""
    if value.startswith(("http://", "https://")):
        host = value.split("/", 3)[2]
        if not host or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"must be an http(s) URL with a host and no spaces (got {value!r})")
        return value
    return check_remote_path(value)


class TokenizerSeed(BaseModel):
    """Where the GPT-2 tokenizer files come from when the cache must be seeded
    (``gpt2-vocab.json`` and ``gpt2-merges.txt``): paths on the login node, or
    http(s) URLs that the login node fetches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vocab: Annotated[str, AfterValidator(check_seed_source)]
    merges: Annotated[str, AfterValidator(check_seed_source)]


def _check_time_limit(value: str | None) -> str | None:
    if value is not None:
        try:
            slurm_time_seconds(value)
        except ValueError as exc:
            raise ValueError(f"{exc} (got {value!r}); use {SLURM_TIME_FORMATS}") from None
    return value


def _check_attach_template(value: str | None) -> str | None:
    if value is None:
        return None
    names = re.findall(r"\{([^{}]*)\}", value)
    unknown = [n for n in names if n not in _ATTACH_FIELDS]
    if unknown:
        known = ", ".join("{" + name + "}" for name in _ATTACH_FIELDS)
        raise ValueError(f"unknown placeholder {{{unknown[0]}}}; use {known}")
    return value


def _check_tensorboard_template(value: str | None) -> str | None:
    """An https link with placeholders only after the host; nothing Slack reads as markup."""
    if value is None:
        return None
    known = ", ".join("{" + n + "}" for n in _TENSORBOARD_FIELDS)
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(value)]
    except ValueError as exc:
        raise ValueError(f"not a template ({exc}); placeholders are {known}") from None
    for name, spec, conversion in fields:
        if name is not None and (name not in _TENSORBOARD_FIELDS or spec or conversion):
            whole = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(f"unknown placeholder {{{whole}}}; use {known}")
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.netloc or "{" in parts.netloc:
        raise ValueError(f"must start with https:// and a host (got {value!r})")
    if re.search(r"[\s<>|`]", value):
        raise ValueError(f"must not contain spaces or < > | ` (got {value!r})")
    return value


class ClusterProfile(BaseModel):
    """One cluster: the login node, Slurm defaults, images and directories.

    Fields left out take their defaults from the cluster ``type`` and from
    ``recipes_dir`` (see :meth:`_fill_defaults`), so every field of a built
    profile holds a concrete value. ``images`` holds each framework's default
    image under the framework's name unless the config names another.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str = Field(pattern=CLUSTER_NAME_PATTERN)
    type: ClusterType
    description: str = Field(default="", max_length=200)
    login: LoginNode
    partition: str = Field(pattern=SLURM_NAME_PATTERN)
    max_nodes: int = Field(ge=1, le=4096)
    account: str | None = Field(default=None, pattern=SLURM_NAME_PATTERN)
    recipes_dir: RemotePath = "~/vertex-oss-training"
    nemorun_home: RemotePath = ""
    images: dict[Annotated[str, Field(pattern=IMAGE_NAME_PATTERN)], RemotePath] = Field(
        default_factory=dict
    )
    allow_custom_images: bool = True
    cache_dir: RemotePath = "~/.cache"
    data_dir: RemotePath = "~/data"
    log_dir: RemotePath = ""
    poll_interval_s: float = Field(default=5.0, gt=0, le=3600)
    time_limit: Annotated[str | None, AfterValidator(_check_time_limit)] = None
    job_secrets: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], SecretRef] = Field(
        default_factory=dict
    )
    attach_url_template: Annotated[str | None, AfterValidator(_check_attach_template)] = None
    tensorboard_url_template: Annotated[str | None, AfterValidator(_check_tensorboard_template)] = (
        None
    )
    gpus_per_node: int = Field(default=0, ge=1, le=64)
    tokenizer_seed: TokenizerSeed | None = None
    identity: Identity | None = None

    @model_validator(mode="after")
    def _identity_users(self) -> ClusterProfile:
        if self.identity is not None:
            wrong = sorted(
                f"{who}: {name}"
                for who, name in self.identity.users.items()
                if name in RESERVED_USERS or name == self.login.user
            )
            if wrong:
                raise ValueError(
                    f"identity.users: {', '.join(wrong)} is root or the shared account "
                    f"{self.login.user}, never a person's user; leave them out (unmapped: "
                    "shared runs those whom nothing names as the shared account)"
                )
            env = {k for k, ref in self.job_secrets.items() if ref.env is not None}
            unknown = [n for n in self.identity.org_secrets if n not in env]
            if unknown:
                raise ValueError(
                    f"identity.org_secrets: {', '.join(unknown)} is not a job_secrets entry "
                    f"given as {{env: NAME}} (those are: {', '.join(sorted(env)) or 'none'})"
                )
        return self

    def people_secrets(self) -> dict[str, SecretRef]:
        """The job secrets a person's own job gets here: ``{file: ...}`` ones (their own
        files) and the ``{env: ...}`` ones ``identity.org_secrets`` names."""
        allowed = self.identity.org_secrets if self.identity is not None else ()
        return {k: r for k, r in self.job_secrets.items() if r.env is None or k in allowed}

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Fill type defaults and the paths derived from ``recipes_dir``."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if v is not None or k in _NULLABLE}
        defaults = TYPE_DEFAULTS.get(data.get("type"))
        if defaults is not None:
            data.setdefault("gpus_per_node", defaults.gpus_per_node)
        recipes_dir = data.setdefault("recipes_dir", "~/vertex-oss-training")
        try:
            check_remote_path(recipes_dir)
        except (TypeError, ValueError, AttributeError):
            return data  # reported on recipes_dir itself
        data.setdefault("nemorun_home", join_remote(recipes_dir, "nemo"))
        if isinstance(data["nemorun_home"], str):
            data.setdefault("log_dir", join_remote(data["nemorun_home"], "logs"))
        images = data.get("images", {})
        if isinstance(images, dict):
            images = dict(images)
            for fw in frameworks().values():
                images.setdefault(fw.name, fw.default_image(recipes_dir))
            data["images"] = images
        return data

    def as_user(self, user: str, key_id: str = "") -> ClusterProfile:
        """This cluster as ``user`` sees it: logged in as them, ``~`` their home, with
        certificates whose key id is ``key_id``. ``""`` (or the shared account's name) is
        the shared account."""
        if not user or user == self.login.user:
            return self
        return self.model_copy(update={"login": self.login.as_user(user, key_id)})

    @property
    def machine(self) -> str:
        return TYPE_DEFAULTS[self.type].machine

    def image_for(self, framework: str) -> str:
        """The default image path for a framework (by default, its image in its directory)."""
        return self.images[framework]

    def job_shape(
        self,
        nodes: int,
        *,
        partition: str | None = None,
        time_limit: str | None = None,
        account: str | None = None,
        exclude: str | None = None,
    ) -> JobShape:
        """What a job of ``nodes`` asks Slurm for on this cluster: the partition, time
        limit and account it names, else this cluster's. The start estimate and the
        submit both take their sbatch options from it."""
        return JobShape(
            nodes=nodes,
            partition=partition or self.partition,
            time_limit=time_limit or self.time_limit,
            account=account or self.account,
            exclude=exclude,
        )

    def resolve_image(self, image: str | None, framework: str) -> str:
        """The image path for a request's ``image=``: a name of ``images``, a path, or None."""
        if image is None:
            return self.image_for(framework)
        return self.images.get(image, image)

    def attach_url(self, *, job_id: str) -> str | None:
        """The optional web link for attaching to an interactive job."""
        if self.attach_url_template is None:
            return None
        return self.attach_url_template.format(
            host=self.login.host,
            port=self.login.port,
            user=self.login.user,
            job_id=job_id,
            cluster=self.name,
        )

    def tensorboard_url(self, *, log_dir: str, job_id: str, launch_id: str) -> str | None:
        """The optional link to a run's TensorBoard (``log_dir`` on the login node)."""
        if self.tensorboard_url_template is None:
            return None
        return self.tensorboard_url_template.format(
            log_dir=quote(log_dir, safe="/~"),
            job_id=quote(job_id, safe=""),
            launch_id=quote(launch_id, safe=""),
        )
