"""Who logs in where: a cluster's login node, the certificates the bot signs for it, and
whose Unix user a launch runs as (:class:`Identity`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from cluster.profile_fields import ENV_NAME_PATTERN
from cluster.ssh.principals import UID_MAX_DEFAULT, UID_MIN_DEFAULT, PersonRules

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

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
    """The login node's host name or address, as the bot's machine reaches it."""
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
    # Not in the config: the key id of the certificates signed for this login, naming
    # the person and what for (set by :meth:`as_user`); sshd logs it with each login.
    _key_id: str = PrivateAttr(default="")
    # Not in the config: set by :meth:`as_user`, which names the CA may sign for as a person.
    _person_rules: PersonRules | None = PrivateAttr(default=None)

    @property
    def key_id(self) -> str:
        return self._key_id or f"trainbot:-:{self.user}:-"

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
    :func:`cluster.accounts.check_person`). A person neither names is refused
    (``unmapped: refuse``, the default) or runs as the shared login account
    (``unmapped: shared``). Needs ``login.user_ca_key_file``.

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
    """For people not in `users`: the local part of their Slack profile's confirmed email, in one of
    `email_domains`, is their user name (never root, `login.user` or a name `users` gives someone
    else)."""
    email_domains: tuple[Annotated[str, Field(pattern=DOMAIN_PATTERN)], ...] = ()
    """The email domains `from_email` accepts (needed with it)."""
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
        if not re.fullmatch(CLUSTER_USER_PATTERN, local):
            return None, f"the name in your Slack profile's email ({local}) is not a username"
        if local in RESERVED_USERS or local == shared:
            return None, f"your Slack profile's email names {local}, which is not a person's user"
        if local in self.users.values():
            return None, f"your Slack profile's email names {local}, who is someone else here"
        return local, ""
