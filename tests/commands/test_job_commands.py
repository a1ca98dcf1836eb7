"""/attach, /cancel, /logs, /jobs, /clusters and the command names themselves."""

from __future__ import annotations

import pytest

from commands import (
    AttachRequest,
    CancelRequest,
    ClustersRequest,
    CommandError,
    JobRef,
    JobsRequest,
    LogsRequest,
    UnwatchRequest,
    WatchRequest,
    parse_command,
)

ACCEPTED = [
    ("/attach 4201", AttachRequest(job=JobRef(id="4201"))),
    ("/attach L-7f3a9c", AttachRequest(job=JobRef(id="L-7f3a9c"))),
    ("/attach l-7F3A", AttachRequest(job=JobRef(id="L-7f3a"))),
    ("/attach 4201 cluster=a3m", AttachRequest(job=JobRef(id="4201", cluster="a3m"))),
    ("/cancel 4187", CancelRequest(job=JobRef(id="4187"))),
    ("/cancel 4187 cluster=A4", CancelRequest(job=JobRef(id="4187", cluster="a4"))),
    ("/logs 4187", LogsRequest(job=JobRef(id="4187"))),
    ("/logs 4187 lines=50", LogsRequest(job=JobRef(id="4187"), lines=50)),
    ("/logs L-7f3a9c plot", LogsRequest(job=JobRef(id="L-7f3a9c"), plot=True)),
    ("/logs 4187 PLOT cluster=a4", LogsRequest(job=JobRef(id="4187", cluster="a4"), plot=True)),
    ("/logs 4187 lines=5000", LogsRequest(job=JobRef(id="4187"), lines=5000)),
    ("/jobs", JobsRequest()),
    ("/jobs all", JobsRequest(all_users=True)),
    ("/jobs mine", JobsRequest()),
    ("/jobs all cluster=a4", JobsRequest(all_users=True, cluster="a4")),
    ("/jobs history", JobsRequest(history=True)),
    ("/jobs history days=30 cluster=a4", JobsRequest(history=True, days=30, cluster="a4")),
    ("/jobs all history", JobsRequest(all_users=True, history=True)),
    ("/jobs watching", JobsRequest(watching=True)),
    ("/jobs WATCHING", JobsRequest(watching=True)),
    ("/watch L-7f3a9c", WatchRequest(job=JobRef(id="L-7f3a9c"))),
    ("/watch 4187 cluster=a4", WatchRequest(job=JobRef(id="4187", cluster="a4"))),
    ("/unwatch l-7F3A", UnwatchRequest(job=JobRef(id="L-7f3a"))),
    ("/clusters", ClustersRequest()),
    ("/clusters a4", ClustersRequest(cluster="a4")),
    ("/clusters cluster=a3h", ClustersRequest(cluster="a3h")),
]


@pytest.mark.parametrize(("line", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(parse, line: str, expected: object) -> None:  # type: ignore[no-untyped-def]
    assert parse(line) == expected


REJECTED = [
    ("/attach", "Which job? Usage: /attach <job> [cluster=C]. /jobs lists yours."),
    (
        "/attach job42",
        "'job42' is not a job: give a launch id such as L-7f3a9c, a sweep id such as "
        "S-41c2aa or a Slurm job id such as 4187.",
    ),
    ("/attach 0", "'0' is not a job"),
    ("/attach 12345678901", "'12345678901' is not a job"),
    ("/attach L-xyz1", "'L-xyz1' is not a job"),
    ("/attach 4201 4202", "Unexpected '4202'. Usage: /attach <job> [cluster=C]."),
    ("/attach 4201 cluster=a5", "Unknown cluster 'a5'. Known clusters: a3m, a3u, a4, a3h."),
    ("/attach 4201 nodes=2", "Unknown key 'nodes' for /attach. Keys: cluster."),
    ("/attach 4201 clustr=a4", "Unknown key 'clustr' for /attach. Keys: cluster. Did you mean"),
    ("/cancel", "Which job? Usage: /cancel <job> [cluster=C]."),
    ("/jobs days=3", "days= goes with history: /jobs history days='3'."),
    ("/jobs history days=0", "days=0 is out of range: give 1 to 400."),
    ("/jobs history days=٣", "days="),
    (
        "/jobs histroy",
        "Unexpected 'histroy'. Usage: /jobs [all] [history [days=N]] [cluster=C] | /jobs watching.",
    ),
    ("/cancel 4187;reboot", "'4187;reboot' is not a job"),
    (
        "/logs 4187 lines=0",
        "lines=0 is out of range: give 1 to 5000.",
    ),
    ("/logs 4187 lines=9000", "lines=9000 is out of range: give 1 to 5000."),
    (
        "/logs 4187 lines=many",
        "lines=many is not a whole number. Give a number from 1 to 5000, for example lines=50.",
    ),
    (
        "/logs 4187 plot lines=20",
        "lines= does not go with plot: the plot shows the whole run. "
        "Usage: /logs <job> [lines=N] | /logs <job> plot.",
    ),
    (
        "/logs 4187 plto",
        "Unexpected 'plto'. Usage: /logs <job> [lines=N] | /logs <job> plot. Did you mean plot?",
    ),
    ("/logs plot", "'plot' is not a job"),
    ("/logs", "Which job? Usage: /logs <job> [lines=N] | /logs <job> plot."),
    (
        "/jobs everyone",
        "Unexpected 'everyone'. Usage: /jobs [all] [history [days=N]] [cluster=C] "
        "| /jobs watching.",
    ),
    ("/jobs al", "Did you mean all?"),
    ("/jobs watchin", "Did you mean watching?"),
    ("/jobs watching all", "Unexpected 'watching'."),
    ("/jobs watching cluster=a4", "/jobs watching takes no keys."),
    ("/watch", "Which job? Usage: /watch <job> [cluster=C]. /jobs lists yours."),
    ("/watch 4187 4188", "Unexpected '4188'. Usage: /watch <job> [cluster=C]."),
    ("/watch job42", "'job42' is not a job"),
    ("/watch 4187 lines=5", "lines"),
    ("/unwatch", "Which job? Usage: /unwatch <job> [cluster=C]."),
    ("/jobs cluster=b1", "Unknown cluster 'b1'."),
    ("/clusters a4 a3m", "Give one cluster at most. Usage: /clusters [cluster=C]."),
    ("/clusters a44", "Unknown cluster 'a44'. Known clusters: a3m, a3u, a4, a3h. Did you mean a4?"),
    (
        "/trian sft",
        "Unknown command '/trian'. Commands: /train, /attach, /jobs, /cancel, /logs, /clusters, "
        "/usage, /watch, /unwatch, /checkpoints. Did you mean /train?",
    ),
    (
        "",
        "Unknown command ''. Commands: /train, /attach, /jobs, /cancel, /logs, /clusters, /usage, "
        "/watch, /unwatch, /checkpoints.",
    ),
]


@pytest.mark.parametrize(("line", "message"), REJECTED, ids=[r[0] or "(empty)" for r in REJECTED])
def test_rejected(parse, line: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError) as caught:
        parse(line)
    assert message in str(caught.value)


def test_command_name_without_slash_and_any_case(context, user) -> None:  # type: ignore[no-untyped-def]
    assert parse_command("JOBS", "all", user=user, context=context) == JobsRequest(all_users=True)


def test_command_and_text_may_be_split_by_any_whitespace(parse) -> None:  # type: ignore[no-untyped-def]
    assert parse("/jobs\tall") == JobsRequest(all_users=True)
    assert parse("  /clusters\n a4 ") == ClustersRequest(cluster="a4")


def test_job_ref_kinds() -> None:
    launch, slurm = JobRef(id="L-7f3a9c"), JobRef(id="4187", cluster="a4")
    assert launch.is_launch_id and not slurm.is_launch_id
    assert str(slurm) == "4187 on a4"
