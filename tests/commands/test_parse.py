"""Properties of the parser over generated input.

- Any text, for any command, gives a request or a CommandError: nothing else, and
  the error's message is one for a person: what was wrong, then what would be right,
  in whole sentences, short whatever the input, with none of Python's insides.
- Every string in an accepted request is made of safe characters only: no
  whitespace, quotes, shell metacharacters or newlines, and no leading '-'.
- Requests round-trip: request -> to_text() -> parse -> the same request, and
  request -> JSON -> request.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.launching.parts import OVERRIDE_VALUE_PATTERN
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.slurm.base import slurm_time_seconds
from commands import (
    COMMANDS,
    REQUEST_ADAPTER,
    CommandContext,
    CommandError,
    InteractiveRequest,
    Request,
    TrainRequest,
    User,
    parse_command,
)
from commands.values import NAME_PATTERN, PARTITION_PATTERN
from tests.commands.lines import parse_line

SAFE = re.compile(r"[A-Za-z0-9._/:+,@~=-]*")
FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=400)
ADMIN = User(id="U0ADMIN")

VALID_PAIRS = [
    "nodes=2",
    "nodes=4",
    "cluster=a4",
    "cluster=a3m",
    "time=04:00:00",
    "time=1-00",
    "name=run-1",
    "image=nemo",
    "image=~/x/y.sqsh",
    "partition=a4",
    "dry_run=true",
    "over_budget=true",
    "framework=nemo-rl",
    "trainer.max_steps=100",
    "policy.max_total_sequence_length=4096",
    "grpo.num_prompts_per_step=8",
]
VOCAB = [
    *COMMANDS,
    "sft",
    "dpo",
    "grpo",
    "rm",
    "pretrain",
    "cpt",
    "interactive",
    "help",
    "recipes",
    "logs",
    "llama3p1_2b",
    "llama3p1_8b",
    "llama3p1_70b",
    *VALID_PAIRS,
    "all",
    "plot",
    "lines=50",
    "4187",
    "L-7f3a9c",
    "=",
    '"',
    "'",
    ";",
    "$(reboot)",
    "`id`",
    "\n",
    "\t",
    "\u200b",
    "\u202e",
    "\u00a0",
    "ｎｏｄｅｓ＝２",
    "“run”",
    "name=a;b",
    "name=a\nb",
    '"name=my run"',
]
KEYS = [
    "nodes",
    "cluster",
    "partition",
    "time",
    "name",
    "image",
    "dry_run",
    "over_budget",
    "framework",
    "lines",
    "trainer.max_steps",
    "logger.wandb_enabled",
]
NASTY = st.text(alphabet="aZ09-_.:/~+@,;$`'\" \n\t=|&<>()*?!#\\", max_size=10)
PAIR = st.tuples(st.sampled_from(KEYS), st.text(max_size=12) | NASTY).map(lambda kv: "=".join(kv))
FRAGMENT = st.one_of(st.sampled_from(VOCAB), st.text(max_size=8), PAIR)
TEXT = st.one_of(
    st.lists(FRAGMENT, max_size=8).map(" ".join),
    st.lists(FRAGMENT, max_size=8).map("".join),
    st.text(max_size=60),
)
TRAIN_TEXT = st.tuples(
    st.sampled_from([f"{e.workload} {e.model}" for e in DEFAULT_CATALOG.entries] + ["interactive"]),
    st.lists(st.one_of(st.sampled_from(VALID_PAIRS), PAIR), max_size=5),
).map(lambda parts: " ".join([parts[0], *parts[1]]))
COMMAND = st.sampled_from([*COMMANDS, "train", "/TRAIN", "/bogus", "", "/train\u200b"])


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings_in(item)]
    return []


# What a message for a person never holds: a traceback, a pydantic error, a Python repr.
INTERNALS = (
    "Traceback", "pydantic", "validation error", "input_value", "errors.pydantic.dev",
    "NoneType", "object at 0x", "<class ", "Error(", "KeyError", "ValueError", "TypeError",
)  # fmt: skip
SENTENCE_END = re.compile(r"[.?:;](?:\s|$)")  # "what was wrong: what is right."
MAX_MESSAGE = 600  # the longest (an unknown key, with every key listed) is about 450


def check_refused(exc: CommandError) -> None:
    """``exc`` says what was wrong and what would be right: two parts at least (sentences,
    or "wrong: right"; the second a usage, a list to choose from, a corrected form), bounded
    in length, no Python internals; what was wrong is the message the error carries."""
    message = str(exc)
    assert message == exc.message and message.strip() == message, repr(message)
    assert message.endswith((".", "?")), message
    assert len(SENTENCE_END.findall(message)) >= 2, message
    assert len(message) <= MAX_MESSAGE, message
    assert not any(word in message for word in INTERNALS), message
    assert "\n" not in message, repr(message)


def check_accepted(request: Request, context: CommandContext, user: User) -> None:
    for text in strings_in(request.model_dump()):
        assert SAFE.fullmatch(text), text
        assert not text.startswith("-"), text
    assert parse_line(request.to_text(), user=user, context=context) == request
    assert REQUEST_ADAPTER.validate_json(REQUEST_ADAPTER.dump_json(request)) == request


@FIXTURES
@given(command=COMMAND, text=TEXT)
def test_any_text_gives_a_request_or_a_command_error(
    context: CommandContext, user: User, command: str, text: str
) -> None:
    try:
        request = parse_command(command, text, user=user, context=context)
    except CommandError as exc:
        check_refused(exc)
        return
    check_accepted(request, context, user)


@FIXTURES
@given(text=TRAIN_TEXT)
def test_train_text_gives_a_request_or_a_command_error(
    context: CommandContext, user: User, text: str
) -> None:
    try:
        request = parse_command("/train", text, user=user, context=context)
    except CommandError as exc:
        check_refused(exc)
        return
    check_accepted(request, context, user)


@FIXTURES
@given(line=TEXT)
def test_any_line_gives_a_request_or_a_command_error(
    context: CommandContext, user: User, line: str
) -> None:
    try:
        request = parse_line(line, user=user, context=context)
    except CommandError as exc:
        check_refused(exc)
        return
    check_accepted(request, context, user)


def slurm_times() -> st.SearchStrategy[str]:
    pattern = (
        r"[0-9]{1,4}|[0-9]{1,2}:[0-5][0-9]:[0-5][0-9]"
        r"|[0-9]{1,2}-([01][0-9]|2[0-3])(:[0-5][0-9]){0,2}"
    )

    def valid(text: str) -> bool:
        try:
            slurm_time_seconds(text)
        except ValueError:
            return False
        return True

    return st.from_regex(pattern, fullmatch=True).filter(valid)


IMAGES = st.one_of(
    st.sampled_from(["nemo", "nemo-rl"]),
    st.from_regex(
        r"(/|~/)[a-z0-9_]{1,8}(/[A-Za-z0-9_.+@-]{1,8}){0,3}\.sqsh", fullmatch=True
    ).filter(lambda p: ".." not in p.split("/")),
)


@st.composite
def launch_fields(draw: st.DrawFn) -> dict[str, Any]:
    def maybe(strategy: st.SearchStrategy[str]) -> str | None:
        return draw(st.none() | strategy)

    return {
        "cluster": draw(st.sampled_from(["a3m", "a3u", "a4", "a3h"])),
        "nodes": draw(st.integers(1, 4)),
        "partition": maybe(st.from_regex(PARTITION_PATTERN, fullmatch=True)),
        "time": maybe(slurm_times()),
        "name": maybe(st.from_regex(NAME_PATTERN, fullmatch=True)),
        "image": maybe(IMAGES),
        "dry_run": draw(st.booleans()),
        "over_budget": draw(st.booleans()),
    }


@st.composite
def train_requests(draw: st.DrawFn) -> TrainRequest:
    entry = draw(st.sampled_from(DEFAULT_CATALOG.entries))
    keys = draw(st.lists(st.sampled_from(sorted(entry.overrides)), unique=True, max_size=3))
    overrides = []
    for key in sorted(keys):
        value = draw(
            st.from_regex(entry.overrides[key], fullmatch=True).filter(
                lambda v: re.fullmatch(OVERRIDE_VALUE_PATTERN, v) is not None
            )
        )
        overrides.append((key, value))
    return TrainRequest(
        workload=entry.workload,
        model=entry.model,
        framework=entry.framework,
        overrides=tuple(overrides),
        **draw(launch_fields()),
    )


@FIXTURES
@given(request=st.one_of(train_requests(), launch_fields().map(lambda f: InteractiveRequest(**f))))
def test_valid_launches_round_trip(context: CommandContext, request: Request) -> None:
    check_accepted(request, context, ADMIN)


@pytest.mark.parametrize(
    "line",
    [
        "/train sft llama3p1_8b nodes=2 cluster=a4",
        "/train sft llama3p1_8b framework=nemo-rl cluster=a4",
        "/train interactive nodes=2",
        "/train help logs",
        "/train recipes dpo",
        "/attach L-7f3a9c",
        "/cancel 4187 cluster=a4",
        "/logs 4187 lines=20",
        "/logs 4187 plot",
        "/jobs all cluster=a3h",
        "/clusters a4",
    ],
)
def test_every_form_round_trips(context: CommandContext, user: User, line: str) -> None:
    check_accepted(parse_line(line, user=user, context=context), context, user)
