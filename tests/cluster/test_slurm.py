"""Slurm builders and parsers, table-tested on output recorded from the dev cluster."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cluster.slurm import base as slurm
from cluster.slurm import sacct, sbatch, sinfo

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("RUNNING", "RUNNING"),
        ("CANCELLED by 1001", "CANCELLED"),
        ("CANCELLED+", "CANCELLED"),
        ("NODE_FAIL", "NODE_FAIL"),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("REQUEUE_HOLD", "REQUEUE_HOLD"),
        ("REQUEUED", "REQUEUED"),
        (" completed ", "COMPLETED"),
        ("", "UNKNOWN"),
        ("WEIRD", "UNKNOWN"),
    ],
)
def test_normalize_state(raw: str, state: str) -> None:
    assert slurm.normalize_state(raw) == state


@pytest.mark.parametrize(
    ("stdout", "job_id", "cluster"),
    [("26\n", "26", None), ("42;trainbot-dev\n", "42", "trainbot-dev"), ("warn\n7\n", "7", None)],
)
def test_parse_sbatch_parsable(stdout: str, job_id: str, cluster: str | None) -> None:
    assert sbatch.parse_sbatch_parsable(stdout) == sbatch.Submitted(job_id, cluster)


def test_parse_sbatch_parsable_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="no job id"):
        sbatch.parse_sbatch_parsable(data("sbatch_invalid_partition.stderr"))


def test_squeue_running_pending() -> None:
    rows = {r.job_id: r for r in slurm.parse_squeue(data("squeue_running.txt"))}
    assert rows["27"].state == "RUNNING" and rows["27"].nodelist == "dev[0-1]"
    assert rows["27"].nodes == 2 and rows["27"].name == "rec-a-L-rec001"
    assert rows["29"].state == "PENDING" and rows["29"].reason == "Resources"
    assert rows["29"].name.endswith("-L-rec003") and len(rows["29"].name) > 50


def test_squeue_requeued_job_shows_restart_count() -> None:
    rows = {r.job_id: r for r in slurm.parse_squeue(data("squeue_requeued.txt"))}
    assert rows["27"].state == "PENDING" and rows["27"].restarts == 1
    assert rows["28"].restarts == 0


def test_sacct_duplicates_show_node_fail_then_requeue() -> None:
    records = sacct.merge_acct(sacct.parse_sacct(data("sacct_duplicates.txt")))
    assert records["27"].earlier[0].state == "NODE_FAIL"
    assert records["27"].latest.state == "CANCELLED"
    assert records["27"].restarts == 1 and records["27"].earlier[0].state == "NODE_FAIL"
    assert records["28"].latest.raw_state == "CANCELLED by 1001"
    assert records["6"].latest.state == "FAILED" and records["6"].latest.exit_code == "15:0"
    assert records["7"].latest.state == "COMPLETED" and records["7"].restarts == 0


def test_sinfo_idle_capacity_in_config_order() -> None:
    infos = sinfo.partitions(sinfo.parse_sinfo(data("sinfo_idle.txt")))
    assert sinfo.format_partitions(infos) == "a3m*, a3u, a4, a3h"
    a4 = next(p for p in infos if p.name == "a4")
    assert (a4.nodes, a4.gpus_total, a4.gpus_idle, a4.gpus_per_node, a4.up) == (4, 32, 32, 8, True)


def test_sinfo_busy_counts_allocated_gpus() -> None:
    a4 = next(
        p for p in sinfo.partitions(sinfo.parse_sinfo(data("sinfo_busy.txt"))) if p.name == "a4"
    )
    assert (a4.gpus_used, a4.gpus_idle) == (24, 8)


def test_sinfo_node_not_responding_is_not_usable() -> None:
    a4 = next(
        p
        for p in sinfo.partitions(sinfo.parse_sinfo(data("sinfo_node_down.txt")))
        if p.name == "a4"
    )
    assert (a4.nodes, a4.nodes_usable, a4.gpus_total) == (4, 3, 24)


@pytest.mark.parametrize(
    ("gres", "gpus"), [("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:0", 0), ("(null)", 0)]
)
def test_gres_gpu_counts(gres: str, gpus: int) -> None:
    row = sinfo.parse_sinfo(f"n1|p|up|idle|{gres}|gpu:0|")[0]
    assert row.gpus_total == gpus


def test_builders_quote_and_validate() -> None:
    assert shlex.split(sacct.build_sacct(["1", "2"]))[-2:] == ["-j", "1,2"]
    assert "-D" in shlex.split(sacct.build_sacct(["1"]))
    assert "-D" not in shlex.split(sacct.build_sacct(["1"], duplicates=False))
    assert slurm.build_scancel(["12", "13_2"]) == "scancel 12 13_2"
    argv = shlex.split(slurm.build_squeue(["5"], user="trainer"))
    assert argv[:3] == ["squeue", "-h", "-O"] and argv[-4:] == ["-j", "5", "-u", "trainer"]
    for bad in ("1;touch x", "$(id)", "", "1 2"):
        with pytest.raises(ValueError):
            slurm.build_scancel([bad])


def test_terminal_states() -> None:
    assert slurm.is_terminal("NODE_FAIL") and slurm.is_terminal("CANCELLED")
    assert not slurm.is_terminal("REQUEUED") and not slurm.is_terminal("RUNNING")


def test_job_names_with_newlines_do_not_split_records() -> None:
    """Recorded: jobs submitted with -J 'x<newline>touch ...' (the injection tests do that)."""
    acct = sacct.parse_sacct(data("sacct_newline_names.txt"))
    assert [r.job_id for r in acct] == ["53", "54", "55"]
    assert all(r.state in ("FAILED", "COMPLETED", "CANCELLED") for r in acct)
    assert "\ntouch " in acct[1].name
    queue = slurm.parse_squeue(data("squeue_newline_names.txt"))
    assert [r.job_id for r in queue] == ["53", "54", "55"]
    assert queue[1].name.startswith("x\ntouch ")


# What ``scontrol show hostnames`` (Slurm 22.05, the dev cluster) prints for each list;
# () where it says "Invalid hostlist".
HOSTLISTS = [
    ("dev[0-1]", ("dev0", "dev1")),
    ("rack[1-2]-node[01-02]", ("rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02")),
    ("c[1,3]-r[2-3]", ("c1-r2", "c1-r3", "c3-r2", "c3-r3")),
    ("n[01-02][1-2]", ("n011", "n012", "n021", "n022")),
    ("n[1-2]-[3-4]", ("n1-3", "n1-4", "n2-3", "n2-4")),
    ("n[1-2].ex[3]", ("n1.ex3", "n2.ex3")),
    ("n[1-3]-ib[0-1],m[5]", tuple(f"n{a}-ib{b}" for a in (1, 2, 3) for b in (0, 1)) + ("m5",)),
    (
        "rack[1-2]-node[01-02],login",
        ("rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02", "login"),
    ),  # fmt: skip
    ("a[008-11]", ("a008", "a009", "a010", "a011")),  # the low bound's width
    ("a[8-011]", ("a8", "a9", "a10", "a11")),
    ("n[01-2]", ("n01", "n02")),
    ("n[09-10]", ("n09", "n10")),
    ("n[99-101]", ("n99", "n100", "n101")),
    ("n[1-3,05]", ("n1", "n2", "n3", "n05")),
    ("n[2,1]", ("n2", "n1")),
    ("n[1-3,2]", ("n1", "n2", "n3", "n2")),
    ("n1[1-2]", ("n11", "n12")),
    ("n-[1-2]", ("n-1", "n-2")),
    ("n[0-0]", ("n0",)),
    ("n[1-2],,m[3-4]", ("n1", "n2", "m3", "m4")),
    ("n[1-2] m", ("n1", "n2", "m")),
    ("n1,n1", ("n1", "n1")),
    ("dev0.example.com", ("dev0.example.com",)),
    ("gpu[07-10]x", ()),  # text after the last bracket
    ("n[1-2]-x", ()),
    ("n[1-2].ex", ()),
    ("n[1-2]x[3]y", ()),
    ("dev[0-1],gpu[07-08]x", ()),  # one invalid entry: the whole list
    ("n[3-1]", ()),
    ("n[a-b]", ()),
    ("n[]", ()),
    ("n[1-2-3]", ()),
    ("n[1-2,]", ()),
    ("n[[1-2]]", ()),
    ("n[1]]", ()),
    ("", ()),
]


@pytest.mark.parametrize(("node_list", "hosts"), HOSTLISTS)
def test_expand_hostlist_as_scontrol_show_hostnames(node_list: str, hosts: tuple[str, ...]) -> None:
    assert slurm.expand_hostlist(node_list) == hosts


def test_expand_hostlist_is_bounded() -> None:
    assert len(slurm.expand_hostlist("n[0-99999999]")) == slurm.MAX_HOSTS
    assert len(slurm.expand_hostlist("a[0-999]b[0-999]")) == slurm.MAX_HOSTS


def acct(job_id: str, state: str, elapsed_s: int, tres: str, name: str = "x-L-abc123") -> str:
    """One ``sacct -X -P -n -o SACCT_FIELDS`` row."""
    return f"{job_id}|{name}|{state}|0:0|0:0|None|00:00:00|dev0|{elapsed_s}|{tres}\n"


GPU8 = "billing=1,cpu=1,gres/gpu=8,node=1"
GPU16 = "billing=2,cpu=2,gres/gpu=16,node=2"
# sacct rows, expected job ids -> GPU-hours, jobs found, missing, running
USAGES = [
    ("", [], 0.0, (), (), ()),  # a launch that never submitted: nothing to wait for
    (acct("7", "COMPLETED", 3600, GPU8), ["7"], 8.0, ("7",), (), ()),
    # requeued: the NODE_FAIL incarnation ran 20 s on 16 GPUs, the second 1 h on 16
    (acct("8", "NODE_FAIL", 20, GPU16) + acct("8", "COMPLETED", 3600, GPU16), ["8"],
     16 + 20 * 16 / 3600, ("8",), (), ()),
    # a retry: the first job cancelled after 1 h, the second ran 10 h (8 GPUs each)
    (acct("9", "CANCELLED by 1001", 3600, GPU8) + acct("10", "COMPLETED", 36000, GPU8),
     ["9", "10"], 88.0, ("9", "10"), (), ()),
    # cancelled while pending: never allocated, nothing used
    (acct("11", "CANCELLED by 1001", 0, ""), ["11"], 0.0, ("11",), (), ()),
    # typed GPUs only
    (acct("12", "FAILED", 1800, "cpu=2,gres/gpu:h100=8,node=1"), ["12"], 4.0, ("12",), (), ()),
    # still running, or not yet in slurmdbd: not final
    (acct("13", "RUNNING", 600, GPU8), ["13"], 600 * 8 / 3600, ("13",), (), ("13",)),
    (acct("14", "COMPLETED", 60, GPU8), ["14", "15"], 60 * 8 / 3600, ("14",), ("15",), ()),
    (acct("16", "PENDING", 0, "") + acct("16", "REQUEUED", 30, GPU8), ["16"], 30 * 8 / 3600,
     ("16",), (), ("16",)),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "expected", "hours", "jobs", "missing", "running"), USAGES)
def test_usage_of_every_job_and_incarnation(
    rows: str,
    expected: list[str],
    hours: float,
    jobs: tuple[str, ...],
    missing: tuple[str, ...],
    running: tuple[str, ...],
) -> None:
    usage = sacct.usage_of(sacct.merge_acct(sacct.parse_sacct(rows)), expected)
    assert usage.gpu_hours == pytest.approx(hours)
    assert (usage.jobs, usage.missing, usage.running) == (jobs, missing, running)
    assert usage.final is (not missing and not running)


def test_launch_usage_counts_each_job_once_and_only_the_launchs() -> None:
    """The recorded jobs, then every job named for the launch: one listed by both halves
    is counted once; a job named for another launch (even one whose id ends the same) is
    not counted; a job of the launch its attempts never recorded is."""
    from cluster.launching.jobs import SEPARATOR, build_usage, parse_usage

    asked = acct("20", "CANCELLED by 1001", 3600, GPU8) + acct("21", "COMPLETED", 1800, GPU8)
    named = (
        acct("20", "CANCELLED by 1001", 3600, GPU8)
        + acct("21", "COMPLETED", 1800, GPU8)
        + acct("22", "CANCELLED by 1001", 90, GPU8)  # submitted, never recorded
        + acct("23", "COMPLETED", 3600, GPU8, name="x-L-abc1234")  # another launch
        + acct("24", "COMPLETED", 3600, GPU8, name="x-L-abc123-other")
    )
    usage = parse_usage(f"{asked}{SEPARATOR}\n{named}", "L-abc123", ["20", "21"])
    assert usage.jobs == ("20", "21", "22") and usage.final
    assert usage.gpu_hours == pytest.approx(8 + 4 + 90 * 8 / 3600)
    command = build_usage("L-abc123", ["20", "21"], "alice", "now-14days")
    assert command.startswith("sacct -X -P -n -D -o ") and " -j 20,21; echo " in command
    assert "-u alice | grep -F -e L-abc123 || true" in command
    assert build_usage("L-abc123", [], "alice", "now-14days").startswith("true; echo ")
    with pytest.raises(ValueError, match="invalid launch id"):
        build_usage("L-1;id", [], "alice", "now-14days")
