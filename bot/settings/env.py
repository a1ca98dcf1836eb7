"""Process settings from the environment (INTERFACE.md, "Environment").

:meth:`Settings.from_environ` is the one place in trainbot that reads
``os.environ``; tests pass their own mapping. Secrets are ``SecretStr``: their
``repr`` and ``str`` show ``**********``. Job secrets and the PagerDuty routing
key are referenced from the config by environment variable name; the values
are kept here and handed out with :meth:`Settings.env_secret`.

Any variable can instead be given as a file: ``NAME_FILE=/run/secrets/name``
(Docker and Kubernetes secrets) stands for ``NAME`` with that file's content,
one trailing newline dropped. The settings' own variables are read at start;
a variable the config names (``{env: NAME}``) when the bot first asks for it,
which is also at start. Setting both ``NAME`` and ``NAME_FILE`` is an error, and so
is a file others (or a group not the process's own) can read (``chmod 600``). A
file's content is never logged nor shown in an error, only its path.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from bot.settings.redis_urls import url_password, without_password
from cluster.errors import ConfigError

FILE_SUFFIX = "_FILE"
ASK_KEY_MIN_CHARS = 32  # TRAINBOT_ASK_KEY: 128 bits and more as hex
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


@dataclass(frozen=True)
class Target:
    """Where Redis is: a URL, or the sentinels that name the primary of ``service``.

    ``wait_replicas`` > 0: after a write that must survive a failover (a queued launch,
    a recorded job id, a cancel) the store asks Redis to ``WAIT`` until that many
    replicas have it, at most ``wait_timeout_ms``. ``retry_for_s``: how long one call
    rides through a failover before it fails.
    """

    url: str = "redis://127.0.0.1:6379/0"
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = "mymaster"
    password: SecretStr | None = None
    username: str | None = None  # an ACL user (with ``password``); None: the default user
    db: int = 0
    wait_replicas: int = 0
    wait_timeout_ms: int = 500
    retry_for_s: float = 2.0
    # Sentinel's own hop: the sentinels' password (``requirepass`` in sentinel.conf), TLS
    sentinel_password: SecretStr | None = None
    sentinel_username: str = ""  # an ACL user of the sentinels ("": the default user)
    sentinel_tls: bool = False
    tls: bool = False  # the data nodes named by the sentinels speak TLS (a URL: rediss://)
    tls_ca_file: str = ""  # the CA that signed the servers' certificates ("": the system's)

    def describe(self) -> str:
        """Where, for logs and ``doctor`` (never a password)."""
        if self.sentinels:
            where = ",".join(f"{host}:{port}" for host, port in self.sentinels)
            hops = [
                what
                for what, on in (("sentinels", self.sentinel_tls), ("data nodes", self.tls))
                if on
            ]
            tls = f" (TLS to the {' and '.join(hops)})" if hops else ""
            return f"sentinel {self.service} via {where}{tls}"
        return without_password(self.url)


class Settings(BaseSettings):
    """Everything the process takes from its environment."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    config_path: Path = Field(default=Path("./trainbot.yaml"), alias="TRAINBOT_CONFIG")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", alias="REDIS_URL")
    # Redis through Sentinel (docs/sentinel.md): the sentinels, the primary's name there
    redis_sentinels: tuple[tuple[str, int], ...] = Field(default=(), alias="REDIS_SENTINELS")
    redis_sentinel_service: str = Field(
        default="mymaster", alias="REDIS_SENTINEL_SERVICE", min_length=1
    )
    redis_password: SecretStr | None = Field(default=None, alias="REDIS_PASSWORD")
    # the Redis ACL user this process logs in as (docker-compose.yml: web, worker, poller)
    redis_username: str | None = Field(
        default=None, alias="REDIS_USERNAME", pattern=r"^[A-Za-z0-9_.-]{1,64}$"
    )
    # the sentinels' own password (their requirepass); the data nodes' is REDIS_PASSWORD
    redis_sentinel_password: SecretStr | None = Field(default=None, alias="REDIS_SENTINEL_PASSWORD")
    # an ACL user of the sentinels (with REDIS_SENTINEL_PASSWORD); unset: the default user
    redis_sentinel_username: str = Field(
        default="", alias="REDIS_SENTINEL_USERNAME", pattern=r"^[A-Za-z0-9._-]{0,64}$"
    )
    # TLS through Sentinel: to the sentinels, to the data nodes they name (with a plain
    # URL, rediss:// says it); the CA file verifies both (unset: the system's CAs)
    redis_sentinel_tls: bool = Field(default=False, alias="REDIS_SENTINEL_TLS")
    redis_tls: bool = Field(default=False, alias="REDIS_TLS")
    redis_tls_ca_file: Path | None = Field(default=None, alias="REDIS_TLS_CA_CERT")
    redis_db: int = Field(default=0, alias="REDIS_DB", ge=0, le=15)  # with Sentinel
    # replicas a queued launch, a job id or a cancel must reach (WAIT); default 1 with
    # Sentinel, 0 with a plain URL
    redis_wait_replicas: int | None = Field(default=None, alias="REDIS_WAIT_REPLICAS", ge=0)
    redis_wait_timeout_ms: int = Field(default=500, alias="REDIS_WAIT_TIMEOUT_MS", ge=1, le=60_000)
    # how long one store call rides through a failover; default 30 with Sentinel, 2 without
    redis_retry_for_s: float | None = Field(default=None, alias="REDIS_RETRY_FOR_S", ge=0, le=600)
    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    # signs the asks a web process puts on Redis for the workers (bot.gateway.ask_wire); the
    # web and worker processes share it, Redis never holds it
    ask_key: SecretStr | None = Field(default=None, alias="TRAINBOT_ASK_KEY")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    http_host: str = Field(default="127.0.0.1", alias="TRAINBOT_HTTP_HOST", min_length=1)
    http_port: int = Field(default=3000, alias="TRAINBOT_HTTP_PORT", ge=1, le=65535)
    # /metrics on a listener of its own (host and port both set); unset: on the HTTP port
    metrics_host: str | None = Field(default=None, alias="TRAINBOT_METRICS_HOST", min_length=1)
    metrics_port: int | None = Field(default=None, alias="TRAINBOT_METRICS_PORT", ge=1, le=65535)
    # a connection as a person (a certificate from the user CA) unused this long is closed
    ssh_person_idle_s: float = Field(
        default=60.0, alias="TRAINBOT_SSH_PERSON_IDLE_S", gt=0, le=3600
    )
    # None: INFO for ``serve``; WARNING where the terminal is the interface (console, doctor)
    # A read-only W&B key: a finished run's summary is read back into its thread
    wandb_read_key: SecretStr | None = Field(default=None, alias="TRAINBOT_WANDB_READ_KEY")
    wandb_api_url: str = Field(default="https://api.wandb.ai", alias="TRAINBOT_WANDB_API_URL")
    log_level: LogLevel | None = Field(default=None, alias="TRAINBOT_LOG_LEVEL")
    log_format: Literal["text", "json"] = Field(default="text", alias="TRAINBOT_LOG_FORMAT")
    # the CLI's API commands (trainbot train, jobs, logs, ...): where the web role listens,
    # and the person's API token
    api_url: str | None = Field(default=None, alias="TRAINBOT_URL", min_length=1)
    api_token: SecretStr | None = Field(default=None, alias="TRAINBOT_TOKEN")

    @field_validator("ask_key")
    @classmethod
    def _ask_key_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < ASK_KEY_MIN_CHARS:
            raise ValueError(
                f"is {len(value.get_secret_value())} characters; it must be at least "
                f"{ASK_KEY_MIN_CHARS} (e.g. python3 -c 'import secrets; "
                "print(secrets.token_hex(32))'), the same in the web and worker processes"
            )
        return value

    @model_validator(mode="after")
    def _metrics_host_needs_port(self) -> Settings:
        if self.metrics_host is not None and self.metrics_port is None:
            raise ValueError(
                "TRAINBOT_METRICS_HOST needs TRAINBOT_METRICS_PORT (the port /metrics listens "
                "on apart from the HTTP port); leave both unset to serve it on the HTTP port"
            )
        return self

    _environ: dict[str, SecretStr] = PrivateAttr(default_factory=dict)
    _from_files: set[str] = PrivateAttr(default_factory=set)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only explicit values: the environment comes in through :meth:`from_environ`."""
        return (init_settings,)

    @model_validator(mode="after")
    def _tls_where_it_applies(self) -> Settings:
        if self.redis_sentinels:
            return self
        sentinel_only = (
            self.redis_sentinel_password is not None
            or self.redis_sentinel_tls
            or self.redis_sentinel_username
        )
        if sentinel_only:
            raise ValueError(
                "REDIS_SENTINEL_PASSWORD, REDIS_SENTINEL_USERNAME and REDIS_SENTINEL_TLS "
                "apply to the sentinels: set REDIS_SENTINELS too, or leave them unset with "
                "a plain REDIS_URL"
            )
        if self.redis_tls and not self.redis_url.startswith("rediss://"):
            raise ValueError(
                "REDIS_TLS=true with a plain REDIS_URL: write the URL as rediss://host:port/db "
                "instead (REDIS_TLS is for the data nodes reached through REDIS_SENTINELS)"
            )
        return self

    @field_validator("redis_tls_ca_file")
    @classmethod
    def _readable_ca(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(
                f"{value} is not a file: give the PEM file of the CA that signed the Redis "
                "servers' and sentinels' certificates"
            )
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        if value.startswith("unix://"):
            return value
        parsed = urllib.parse.urlsplit(value)
        try:
            parsed.port  # noqa: B018 - read for its check
        except ValueError:
            raise ValueError(
                "its port is not a number: write redis://[:password@]host:port/db, e.g. "
                "redis://redis:6379/0"
            ) from None
        db = parsed.path.strip("/")
        if db and not db.isdigit():
            raise ValueError(
                "the database after the host must be a number, e.g. redis://redis:6379/0"
            )
        return value

    @field_validator("redis_sentinels", mode="before")
    @classmethod
    def _parse_sentinels(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        found: list[tuple[str, int]] = []
        for item in value.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(
                    f"{item.strip()!r} is not host:port; give the sentinels as "
                    "host:port,host:port,... (e.g. 10.0.0.5:26379,10.0.0.6:26379)"
                )
            found.append((host.strip("[]"), int(port)))
        return tuple(found)

    def redis_target(self) -> Target:
        """Where the store connects: the sentinels when given, else ``REDIS_URL``."""
        sentinel = bool(self.redis_sentinels)
        wait = self.redis_wait_replicas
        retry = self.redis_retry_for_s
        return Target(
            url=self.redis_url,
            sentinels=self.redis_sentinels,
            service=self.redis_sentinel_service,
            password=self.redis_password,
            username=self.redis_username,
            db=self.redis_db,
            wait_replicas=(1 if sentinel else 0) if wait is None else wait,
            wait_timeout_ms=self.redis_wait_timeout_ms,
            retry_for_s=(30.0 if sentinel else 2.0) if retry is None else retry,
            sentinel_password=self.redis_sentinel_password,
            sentinel_username=self.redis_sentinel_username,
            sentinel_tls=self.redis_sentinel_tls,
            tls=self.redis_tls or self.redis_url.startswith("rediss://"),
            tls_ca_file=str(self.redis_tls_ca_file or ""),
        )

    def redis_secrets(self) -> list[str]:
        """Every Redis password this process holds (for the redactor): the data nodes',
        the sentinels' and any in ``REDIS_URL``."""
        found = [self.redis_password, self.redis_sentinel_password]
        values = [v.get_secret_value() for v in found if v is not None]
        return [*values, url_password(self.redis_url)]

    @field_validator("slack_api_url")
    @classmethod
    def _check_api_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value if value.endswith("/") else value + "/"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``environ`` (default: the process environment).

        An empty variable counts as unset. A bad value raises ConfigError
        naming the variable.
        """
        env = dict(os.environ if environ is None else environ)
        names = {field.alias for field in cls.model_fields.values() if field.alias}
        from_files = {name for name in names if env.get(name + FILE_SUFFIX)}
        for name in sorted(from_files):
            env[name] = _read_secret_file(name, env)
        values = {name: value for name, value in env.items() if name in names and value}
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else ""
            got = values.get(name, "")
            if name == "REDIS_URL":  # it may carry the password: never echoed with it
                got = without_password(got)
            shown = "" if _is_secret(cls, name) else f" (got {got!r})"
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"{msg}{shown}", source="environment", path=name) from None
        settings._environ = {name: SecretStr(value) for name, value in env.items() if value}
        settings._from_files = from_files
        return settings

    def env_secret(self, name: str) -> SecretStr | None:
        """The value of environment variable ``name`` (or of the file ``NAME_FILE`` names),
        or None when unset or empty."""
        value = self._environ.get(name)
        path = self._environ.get(name + FILE_SUFFIX)
        if path is not None and not name.endswith(FILE_SUFFIX):
            if value is not None and name not in self._from_files:
                raise ConfigError(
                    f"set {name} or {name}{FILE_SUFFIX}, not both",
                    source="environment",
                    path=name,
                )
            if value is None:
                env = {name + FILE_SUFFIX: path.get_secret_value()}
                content = _read_secret_file(name, env)
                value = SecretStr(content) if content else None
                if value is not None:
                    self._environ[name] = value
                self._from_files.add(name)
        return value

    def require_env_secret(self, name: str, *, needed_by: str) -> SecretStr:
        """Like :meth:`env_secret`, but a missing value is a ConfigError naming who needs it."""
        value = self.env_secret(name)
        if value is None:
            raise ConfigError(
                f"is not set (needed by {needed_by})", source="environment", path=name
            )
        return value


def _read_secret_file(name: str, env: dict[str, str]) -> str:
    """The content of the file ``NAME_FILE`` names, for ``NAME`` (which must not be set too)."""
    variable = name + FILE_SUFFIX
    if env.get(name):
        raise ConfigError(f"set {name} or {variable}, not both", source="environment", path=name)
    path = Path(env[variable])
    try:
        found = path.stat()
        if who := _who_else_reads(found.st_mode, found.st_gid):
            raise ConfigError(
                f"{path} can be read by {who} (mode {found.st_mode & 0o777:04o}): a secret "
                f"file must be readable by the user trainbot runs as (and its own group) "
                f"alone; chmod 600 {path}",
                source="environment",
                path=variable,
            )
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(
            f"cannot read {path}: {reason}", source="environment", path=variable
        ) from None
    return content.removesuffix("\n").removesuffix("\r")


def _who_else_reads(mode: int, gid: int) -> str:
    """Who, besides the process, may read a file of ``mode`` and group ``gid`` ("": no
    one): others, or a group that is not the process's own. A group-readable file of the
    process's own group is allowed: Kubernetes mounts secrets so (``fsGroup``, mode 0440)."""
    if mode & 0o004:
        return "others"
    if mode & 0o040 and gid != os.getgid():
        return f"its group (gid {gid}, not this process's {os.getgid()})"
    return ""


def _is_secret(cls: type[Settings], alias: str) -> bool:
    for field in cls.model_fields.values():
        if field.alias == alias:
            return "SecretStr" in repr(field.annotation)
    return False
