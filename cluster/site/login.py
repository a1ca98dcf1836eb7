"""Who logs in where: a cluster's login node and the jump hosts in front of it, the
certificates the bot signs for it, and whose Unix user a launch runs as
(:class:`Identity`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PrivateAttr,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from cluster.site.profile_fields import ENV_NAME_PATTERN
from cluster.ssh.principals import UID_MAX_DEFAULT, UID_MIN_DEFAULT, PersonRules

CLUSTER_USER_PATTERN = r"^[a-z_][a-z0-9_.-]{0,31}$"
ClusterUser = Annotated[str, Field(pattern=CLUSTER_USER_PATTERN)]
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$"
_JUMP_RE = re.compile(
    r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s]+)(?::(?P<port>[0-9]+))?"
)
# The same, for the JSON Schema of trainbot.yaml (editors check the text form with it).
JUMP_TEXT_PATTERN = r"^(?:[^@\s]+@)?(?:\[[^\]\s]+\]|[^:@\s]+)(?::[0-9]+)?$"


class JumpHost(BaseModel):
    """One jump host (bastion) on the way to a login node, as ``user@host:port`` or a
    mapping. ``user`` defaults to the login's user (the person's, when the bot acts as
    one), ``key_file`` and ``known_hosts_file`` to the login's; with no key file at all
    the hop gets a certificate from the login's user CA, as the login does. Its host key
    is checked against its known_hosts like the login node's."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host: str = Field(pattern=HOST_PATTERN)
    """The jump host's name or address, as the hop before it (or the bot) reaches it."""
    port: int = Field(default=22, ge=1, le=65535)
    """Its SSH port."""
    user: ClusterUser | None = None
    """Who logs in there; default: the login's user (the person's, when the bot acts as one)."""
    key_file: Path | None = None
    """On the bot's machine: the key to log in there with; default: the login's (or a
    certificate from its user CA)."""
    known_hosts_file: Path | None = None
    """On the bot's machine: its host key; default: the login's known_hosts file."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """A jump host is a mapping or its ``user@host:port`` text: the schema takes both."""
        text = {"type": "string", "pattern": JUMP_TEXT_PATTERN, "title": "user@host:port"}
        return {"anyOf": [text, handler(core_schema)]}

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        """``user@host:port`` (user and port optional; ``[::1]:22`` for IPv6)."""
        if not isinstance(data, str):
            return data
        found = _JUMP_RE.fullmatch(data.strip())
        if found is None:
            raise ValueError(
                f"a jump host is user@host:port (user and port optional) or a mapping "
                f"with host, port, user, key_file, known_hosts_file (got {data!r})"
            )
        parsed: dict[str, Any] = {"host": found["host"].strip("[]")}
        if found["user"]:
            parsed["user"] = found["user"]
        if found["port"]:
            parsed["port"] = int(found["port"])
        return parsed


def where(user: str, host: str, port: int) -> str:
    """``user@host:port``, an IPv6 address in brackets (``user@[fd00::1]:22``)."""
    return f"{user}@{'[' + host + ']' if ':' in host else host}:{port}"


@dataclass(frozen=True)
class Hop:
    """One SSH connection of a route to a login node, everything resolved: a jump host
    or the login node itself (what :mod:`cluster.ssh` connects to)."""

    host: str
    port: int
    user: str
    key_file: Path | None
    known_hosts_file: Path | None
    user_ca_key_file: Path | None
    cert_ttl_s: int
    key_id: str
    # The CA's rules for a person's name: the login's when the hop logs in as the login's
    # user (a person's route), None for a hop that names its own account in the config.
    person_rules: PersonRules | None = None

    @property
    def where(self) -> str:
        """``user@host:port`` as ``ssh -J`` takes it (an IPv6 address in brackets)."""
        return where(self.user, self.host, self.port)


class LoginNode(BaseModel):
    """How the bot reaches the cluster's login node over SSH.

    ``user`` is the shared account. ``user_ca_key_file`` is the private key of an
    SSH certificate authority the login node's sshd trusts (``TrustedUserCAKeys``):
    with it, the bot logs in as a person (see :class:`Identity`) with a certificate
    it signs for that one username, valid for ``cert_ttl_s``. A login with no
    ``key_file`` uses such a certificate for ``user`` too.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host: str = Field(pattern=HOST_PATTERN)
    """The login node's host name or address, as the bot's machine reaches it (or, with
    `jump`, as the last jump host does)."""
    port: int = Field(default=22, ge=1, le=65535)
    """Its SSH port."""
    user: ClusterUser
    """The shared account: cluster discovery, `/clusters`, and the launches of people `identity`
    does not map run as it."""
    key_file: Path | None = None
    """On the bot's machine: the private key the bot logs in with; null: a certificate from
    `user_ca_key_file` for this user too."""
    known_hosts_file: Path | None = None
    """On the bot's machine: the login node's host keys; an unknown or changed key is always
    refused."""
    user_ca_key_file: Path | None = None
    """On the bot's machine: the private key of an SSH user CA the login node's sshd trusts
    (`TrustedUserCAKeys`), owned by the user trainbot runs as, mode 600; needed for `identity`."""
    cert_ttl_s: int = Field(default=300, ge=60, le=86400)
    """Seconds each certificate the bot signs is valid (60 to 86400); a connection is replaced once
    it runs out."""
    jump: tuple[JumpHost, ...] = Field(default=(), max_length=8)
    """Jump hosts, first to last (`user@host:port` or a mapping): the login node is reached
    through each in turn, every host key checked (docs/clusters.md)."""
    # Not in the config: the key id of the certificates signed for this login, naming
    # the person and what for (set by :meth:`as_user`); sshd logs it with each login.
    _key_id: str = PrivateAttr(default="")
    # Not in the config: set by :meth:`as_user`, which names the CA may sign for as a person.
    _person_rules: PersonRules | None = PrivateAttr(default=None)

    @property
    def key_id(self) -> str:
        return self._key_id or f"trainbot:-:{self.user}:-"

    def hops(self) -> tuple[Hop, ...]:
        """The jump hosts, first to last, each resolved against this login (see
        :class:`JumpHost`); empty when the login node is reached directly."""
        return tuple(
            Hop(
                host=jump.host,
                port=jump.port,
                user=jump.user or self.user,
                key_file=jump.key_file or self.key_file,
                known_hosts_file=jump.known_hosts_file or self.known_hosts_file,
                user_ca_key_file=self.user_ca_key_file,
                cert_ttl_s=self.cert_ttl_s,
                key_id=self.key_id,
                person_rules=self.person_rules if jump.user is None else None,
            )
            for jump in self.jump
        )

    @property
    def route(self) -> str:
        """``user@host:port`` of each jump host then the login node, joined by `` -> ``."""
        return " -> ".join([*(hop.where for hop in self.hops()), self.where])

    @property
    def where(self) -> str:
        """``user@host:port`` as ``ssh -J`` takes it (an IPv6 address in brackets)."""
        return where(self.user, self.host, self.port)

    def ssh_command(self) -> str:
        """How a person reaches this login node by hand with a terminal:
        ``ssh -t [-J jump@bastion:22] -p 22 user@host``."""
        jump = ",".join(hop.where for hop in self.hops())
        return f"ssh -t {'-J ' + jump + ' ' if jump else ''}-p {self.port} {self.user}@{self.host}"

    @property
    def person_rules(self) -> PersonRules | None:
        """None for the shared account's own login; a person's login: what the CA checks."""
        return self._person_rules

    def as_user(self, user: str, key_id: str = "", rules: PersonRules | None = None) -> LoginNode:
        """The same login node, reached as ``user`` with a certificate (no key file)
        whose key id is ``key_id`` (``trainbot:<person>:<user>:<launch or purpose>``);
        the CA signs it only for a name ``rules`` allows (by default: a person's name)."""
        if user == self.user:
            return self
        login = self.model_copy(update={"user": user, "key_file": None})
        login._key_id = key_id
        login._person_rules = rules or PersonRules(shared=self.user, shared_login=self)
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
    :func:`cluster.site.accounts.check_person`). A person neither names is refused
    (``unmapped: refuse``, the default) or runs as the shared login account
    (``unmapped: shared``). Needs ``login.user_ca_key_file``.

    ``email_username`` says how an email becomes a username: ``local_part``
    (``alice@example.com`` -> ``alice``) or ``oslogin``, Google Cloud OS Login's POSIX
    usernames (the whole address, lower case, every character other than a letter or
    digit made ``_``: ``alice@example.com`` -> ``alice_example_com``). A name longer than
    32 characters is refused (OS Login shortens those its own way): map such a person
    in ``users``.

    ``org_secrets`` names the ``job_secrets`` given as ``{env: NAME}`` (the
    organisation's, held by the bot) that people's jobs get; every other ``{env: ...}``
    secret is withheld from them (a person's job could read it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    users: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9._@-]{1,80}$")], ClusterUser] = Field(
        default_factory=dict
    )
    """Slack user id (or console name) to Unix user name on this cluster."""
    from_email: bool = False
    """For people not in `users`: their Slack profile's confirmed email, in one of
    `email_domains`, names their user (its local part, or as `email_username` says; never root,
    `login.user` or a name `users` gives someone else)."""
    email_domains: tuple[Annotated[str, Field(pattern=DOMAIN_PATTERN)], ...] = ()
    """The email domains `from_email` accepts (needed with it)."""
    email_username: Literal["local_part", "oslogin"] = "local_part"
    """How an email names the user: `local_part` (`alice@example.com` -> `alice`) or `oslogin`
    (Google Cloud OS Login: `alice_example_com`)."""
    unmapped: Literal["refuse", "shared"] = "refuse"
    """People neither `users` nor `from_email` maps: `refuse` (with a message naming whom to ask) or
    `shared` (run as `login.user`)."""
    org_secrets: tuple[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], ...] = ()
    """The `{env: NAME}` job secrets people's own jobs get (a person's job can read and keep them);
    default none."""
    uid_min: int = Field(default=UID_MIN_DEFAULT, ge=1)
    """The user CA signs for a person only when the login node gives the name a uid from
    `uid_min` to `uid_max` (root, system accounts and `login.user`: never)."""
    uid_max: int = Field(default=UID_MAX_DEFAULT, ge=1)
    """The highest uid a person may have (see `uid_min`)."""
    name_pattern: str = Field(default=CLUSTER_USER_PATTERN, min_length=1, max_length=200)
    """A regular expression every person's Unix user must match before the CA signs for it."""
    reserved: tuple[ClusterUser, ...] = ()
    """Names the CA never signs for (the site's service accounts), besides root and the rest."""

    @model_validator(mode="after")
    def _uid_range(self) -> Identity:
        if self.uid_min > self.uid_max:
            raise ValueError(
                f"identity.uid_min ({self.uid_min}) is above identity.uid_max "
                f"({self.uid_max}); people's uids lie between them (e.g. 1000 and 60000)"
            )
        try:
            re.compile(self.name_pattern)
        except re.error as exc:
            raise ValueError(
                f"identity.name_pattern is not a regular expression ({exc}); "
                f"e.g. {CLUSTER_USER_PATTERN}"
            ) from None
        return self

    def person_rules(self, login: LoginNode) -> PersonRules:
        """What the CA checks before it signs for a person on this cluster."""
        return PersonRules(
            shared=login.user,
            shared_login=login,
            uid_min=self.uid_min,
            uid_max=self.uid_max,
            name_pattern=self.name_pattern,
            reserved=frozenset(self.reserved),
        )

    def check_user(self, user_id: str, name: str, shared: str) -> str:
        """Why ``name`` ("": the shared account) cannot be whom ``user_id``'s launches run
        as, by this config alone ("" when it can). The email behind a ``from_email`` name is
        checked by whoever can ask Slack; here: what no record may claim."""
        if user_id in self.users:
            mapped = self.users[user_id]
            if name != mapped:
                return f"the configuration maps {user_id} to {mapped}, not to {name or shared}"
            return ""
        if not name:
            if self.unmapped == "shared":
                return ""
            return f"{user_id} has no user here and unmapped people are refused"
        if not self.from_email:
            return f"the configuration names no user for {user_id} (the record says {name})"
        if name in RESERVED_USERS or name == shared:
            return f"{name} is not a person's user"
        if name in self.users.values():
            return f"{name} is someone else's user here"
        if not re.fullmatch(CLUSTER_USER_PATTERN, name):
            return f"{name!r} is not a username"
        return ""

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
        if self.email_username == "oslogin":
            local = oslogin_username(local, domain)
        if not re.fullmatch(CLUSTER_USER_PATTERN, local):
            return None, f"the name in your Slack profile's email ({local}) is not a username"
        if local in RESERVED_USERS or local == shared:
            return None, f"your Slack profile's email names {local}, which is not a person's user"
        if local in self.users.values():
            return None, f"your Slack profile's email names {local}, who is someone else here"
        return local, ""


def oslogin_username(local: str, domain: str) -> str:
    """The OS Login POSIX username of ``local@domain``: lower case, every character
    other than a letter or digit made ``_`` (``alice.b@example.com`` ->
    ``alice_b_example_com``)."""
    return re.sub(r"[^a-z0-9]", "_", f"{local}@{domain}".lower())
