"""The CLI's API commands (``trainbot train|jobs|logs|cancel|checkpoints|watch|unwatch|
usage|clusters``).

They speak only the HTTP API (``TRAINBOT_URL``, a personal token in ``TRAINBOT_TOKEN``),
with the standard library's HTTP client: every rule is the server's, and what is printed
is the text the core gives Slack (mrkdwn entities turned back into characters). Exit
codes: 0 answered, 1 refused (or, for ``logs -f``, the launch did not end COMPLETED),
2 usage or set-up error (no URL, no token, the server unreachable).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from bot.settings.env import Settings

API = "/api/v1"
END_MARK = "[trainbot]"
TIMEOUT_S = 30.0
FOLLOW_TIMEOUT_S = 600.0  # no byte at all for this long: the connection is taken as lost


class ClientError(Exception):
    """The CLI could not ask (no URL or token, server unreachable): said, exit 2."""


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status < 300 and bool(self.body.get("ok"))


def plain(text: str) -> str:
    """Slack mrkdwn's entities back to characters, for a terminal."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@dataclass(frozen=True)
class Client:
    url: str
    token: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        if not settings.api_url:
            raise ClientError(
                "TRAINBOT_URL is not set: the address of trainbot's web role, "
                "e.g. export TRAINBOT_URL=http://trainbot.example.com:3000"
            )
        if settings.api_token is None:
            raise ClientError(
                "TRAINBOT_TOKEN is not set: make a token in trainbot's App Home in Slack "
                "(Create an API token) and export TRAINBOT_TOKEN=<it>"
            )
        url = settings.api_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ClientError(f"TRAINBOT_URL must start with http:// or https://, not {url!r}")
        return cls(url, settings.api_token.get_secret_value())

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> Any:
        """The open HTTP response (any status); ClientError when the server cannot be reached."""
        wanted = {k: v for k, v in (query or {}).items() if v}
        full = self.url + API + path + (f"?{urllib.parse.urlencode(wanted)}" if wanted else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(full, data=data, headers=headers, method=method)
        try:
            return urllib.request.urlopen(req, timeout=timeout_s)  # noqa: S310 - http(s) only
        except urllib.error.HTTPError as error:
            return error
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ClientError(f"cannot reach {self.url}: {reason}") from None

    def call(self, method: str, path: str, **kwargs: Any) -> ApiAnswer:
        with self.request(method, path, **kwargs) as response:
            raw = response.read()
            status = int(response.status)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            shown = raw[:200].decode("utf-8", "replace").strip()
            raise ClientError(f"{self.url} answered {status} and not trainbot's JSON: {shown}")
        return ApiAnswer(status, body)


def _quote(job: str) -> str:
    return urllib.parse.quote(job, safe="")


def _say(answer: ApiAnswer, out: IO[str], as_json: bool) -> int:
    if as_json:
        print(json.dumps(answer.body, indent=2, ensure_ascii=False), file=out)
    else:
        print(plain(str(answer.body.get("text", ""))), file=out)
        extra = answer.body.get("log") or answer.body.get("csv")
        if extra:
            print(extra, end="" if str(extra).endswith("\n") else "\n", file=out)
    return 0 if answer.ok else 1


def follow(client: Client, job: str, cluster: str, out: IO[str]) -> int:
    """``logs -f``: print the log as it grows; 0 when the launch ended COMPLETED."""
    query = {"follow": "true", "cluster": cluster}
    with client.request(
        "GET", f"/launches/{_quote(job)}/logs", query=query, timeout_s=FOLLOW_TIMEOUT_S
    ) as response:
        if "json" in response.headers.get("Content-Type", ""):  # refused, not a stream
            answer = ApiAnswer(int(response.status), json.loads(response.read() or b"{}"))
            return _say(answer, sys.stderr, False) or 1
        last = ""
        for raw in response:
            line = raw.decode("utf-8", "replace")
            out.write(line)
            out.flush()
            last = line
    ended = last.startswith(END_MARK) and " ended " in last
    return 0 if ended and " ended COMPLETED" in last else 1


def run_command(args: argparse.Namespace, settings: Settings, out: IO[str] = sys.stdout) -> int:
    """One API command of the CLI, printed to ``out``; its exit code."""
    client = Client.from_settings(settings)
    as_json = bool(getattr(args, "json", False))
    cluster = getattr(args, "cluster", None) or ""
    calls: dict[str, Callable[[], ApiAnswer]] = {
        "train": lambda: client.call(
            "POST",
            "/launches",
            body={
                "text": " ".join(args.words),
                **({"channel": args.channel} if args.channel else {}),
            },
        ),
        "jobs": lambda: client.call("GET", "/launches", query={"args": " ".join(args.words)}),
        "cancel": lambda: client.call(
            "POST", f"/launches/{_quote(args.job)}/cancel", query={"cluster": cluster}
        ),
        "checkpoints": lambda: client.call(
            "GET", f"/launches/{_quote(args.job)}/checkpoints", query={"cluster": cluster}
        ),
        "watch": lambda: client.call(
            "POST", f"/launches/{_quote(args.job)}/watch", query={"cluster": cluster}
        ),
        "unwatch": lambda: client.call(
            "DELETE", f"/launches/{_quote(args.job)}/watch", query={"cluster": cluster}
        ),
        "usage": lambda: client.call("GET", "/usage", query={"args": " ".join(args.words)}),
        "clusters": lambda: client.call("GET", "/clusters", query={"args": " ".join(args.words)}),
    }
    if args.command == "logs":
        if args.follow:
            return follow(client, args.job, cluster, out)
        lines = str(args.lines) if args.lines else ""
        query = {"lines": lines, "cluster": cluster}
        return _say(
            client.call("GET", f"/launches/{_quote(args.job)}/logs", query=query), out, as_json
        )
    return _say(calls[args.command](), out, as_json)


API_COMMANDS = (
    "train", "jobs", "logs", "cancel", "checkpoints", "watch", "unwatch", "usage", "clusters"
)  # fmt: skip


def add_parsers(sub: Any) -> None:
    """The API commands' parsers, on the CLI's subcommands."""
    env = "(TRAINBOT_URL, TRAINBOT_TOKEN)"
    train = sub.add_parser("train", help=f"/train over the API {env}")
    train.add_argument(
        "words", nargs="+", metavar="WORD", help="<workload> <model> [key=value ...]"
    )
    train.add_argument("--channel", metavar="ID", help="the thread's channel (default: your DM)")
    jobs = sub.add_parser("jobs", help=f"/jobs over the API {env}")
    jobs.add_argument(
        "words", nargs="*", metavar="WORD", help="as after /jobs: all, history days=N"
    )
    logs = sub.add_parser("logs", help=f"/logs over the API; -f follows it to the end {env}")
    logs.add_argument("job", help="launch id or Slurm job id")
    logs.add_argument("-f", "--follow", action="store_true", help="follow the log until the end")
    logs.add_argument("--lines", type=int, metavar="N", help="how many lines (default 50)")
    cancel = sub.add_parser("cancel", help=f"cancel a launch or sweep over the API {env}")
    cancel.add_argument("job", help="launch id, sweep id or Slurm job id")
    checkpoints = sub.add_parser("checkpoints", help=f"a launch's checkpoints {env}")
    checkpoints.add_argument("job", help="launch id or Slurm job id")
    watch = sub.add_parser("watch", help=f"/watch: someone's launch by DM {env}")
    watch.add_argument("job", help="launch id or Slurm job id")
    unwatch = sub.add_parser("unwatch", help=f"/unwatch {env}")
    unwatch.add_argument("job", help="launch id or Slurm job id")
    usage = sub.add_parser("usage", help=f"/usage over the API {env}")
    usage.add_argument("words", nargs="*", metavar="WORD", help="as after /usage: me, week, ...")
    clusters = sub.add_parser("clusters", help=f"/clusters over the API {env}")
    clusters.add_argument("words", nargs="*", metavar="WORD", help="as after /clusters")
    for parser in (logs, cancel, checkpoints, watch, unwatch):
        parser.add_argument("--cluster", metavar="NAME", help="the cluster of a Slurm job id")
    for parser in (train, jobs, logs, cancel, checkpoints, watch, unwatch, usage, clusters):
        parser.add_argument("--json", action="store_true", help="print the API's JSON answer")
