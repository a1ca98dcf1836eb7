"""``/images``, ``/images fetch`` and ``/images import``: parsing and checking (pure)."""

from __future__ import annotations

import pytest

from cluster.images.jobs import plan_fetch, plan_import
from commands import CommandContext, CommandError, Policy, PolicyRule, Principals, User
from commands.requests import ImagesRequest
from commands.rules import ImageRule
from tests.commands.conftest import CLUSTER_TYPES, build_profile
from tests.commands.lines import parse_line

IMAGES = "~/vertex-oss-training/images"


def context(*, region: str | None = "us", allow: bool = True, dirs: tuple[str, ...] = ("~/",),
            image_dir: str = "") -> CommandContext:  # fmt: skip
    extra: dict[str, object] = {"region": region, "allow_custom_images": allow}
    if image_dir:
        extra["image_dir"] = image_dir
    clusters = {name: build_profile(name, 4, **extra) for name in CLUSTER_TYPES}
    policy = Policy(
        admins=Principals(users=("U0ADMIN",)),
        rules=(
            PolicyRule(users=("U0NOA4",), clusters=("a3m",), max_nodes=2),
            PolicyRule(users=("U0ALICE",), max_nodes=4),
        ),
        custom_images=(ImageRule(users=("U0ALICE",), dirs=dirs),) if dirs else (),
    )
    return CommandContext.model_validate({"clusters": clusters, "policy": policy})


def parse(line: str, ctx: CommandContext | None = None, user: str = "U0ALICE") -> ImagesRequest:
    request = parse_line(line, user=User(id=user, name=user), context=ctx or context())
    assert isinstance(request, ImagesRequest)
    return request


ACCEPTED = [
    ("/images", ImagesRequest()),
    ("/images cluster=a4", ImagesRequest(cluster="a4")),
    (
        "/images fetch nemo cluster=a4",
        ImagesRequest(cluster="a4", action="fetch", framework="nemo"),
    ),
    ("/images FETCH nemo_rl", ImagesRequest(cluster="a3m", action="fetch", framework="nemo-rl")),
    (
        "/images import nvcr.io/nvidia/nemo:26.02 as nemo-26.02 cluster=a4",
        ImagesRequest(
            cluster="a4", action="import", source="nvcr.io/nvidia/nemo:26.02", name="nemo-26.02"
        ),
    ),  # fmt: skip
    (
        "/images import docker://nvcr.io#nvidia/nemo-rl:v0.5.0 AS rl_05",
        ImagesRequest(
            cluster="a3m",
            action="import",
            source="docker://nvcr.io#nvidia/nemo-rl:v0.5.0",
            name="rl_05",
        ),
    ),  # fmt: skip
]


@pytest.mark.parametrize(("line", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_and_said_back_the_same(line: str, expected: ImagesRequest) -> None:
    ctx = context()
    request = parse(line, ctx)
    assert request == expected
    assert parse(request.to_text(), ctx) == request  # the canonical line parses back


REJECTED = [
    (
        "/images fetchh nemo",
        "/images takes no word 'fetchh'. Usage: /images [cluster=C], "
        "/images fetch <framework> [cluster=C] or /images import <docker-uri> as <name> "
        "[cluster=C]. Did you mean fetch?",
    ),
    (
        "/images fetch",
        "Usage: /images fetch <framework> [cluster=C], with one framework: nemo, nemo-rl",
    ),
    (
        "/images fetch megatron-bridge",
        "The guide has no prebuilt image for 'megatron-bridge'. It has one for nemo, nemo-rl.",
    ),
    (
        "/images import nvcr.io/nvidia/nemo:26.02 nemo26",
        "Usage: /images import <docker-uri> as <name> [cluster=C], for example",
    ),
    ("/images import /home/me/x.sqsh as x", "'/home/me/x.sqsh' is not a registry reference."),
    (
        "/images import nvcr.io/nvidia/nemo:26.02 as ../../etc/x",
        "Cannot import as "
        "'../../etc/x': image name '../../etc/x' is not valid: use 1 to 32 lower case letters",
    ),
    ("/images import nvcr.io/nvidia/nemo:26.02 as a/b", "image name 'a/b' is not valid"),
    ("/images import nvcr.io/nvidia/nemo:26.02 as x..y", "image name 'x..y' is not valid"),
    ("/images import nvcr.io/nvidia/nemo:26.02 as Nemo", "image name 'Nemo' is not valid"),
    (
        "/images import nvcr.io/nvidia/nemo:26.02 as nemo",
        "'nemo' is already an image of a3m in "
        "its config (~/vertex-oss-training/nemo/nemo-20250721.sqsh); choose another name",
    ),
    ("/images import nvcr.io/nvidia/nemo:26.02 as x cluster=a5", "Unknown cluster 'a5'"),
    ("/images import nvcr.io/nvidia/nemo:26.02 as x nodes=2", "Unknown key 'nodes' for /images"),
]


@pytest.mark.parametrize(("line", "message"), REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected_with_what_would_do(line: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse(line)
    assert message in str(caught.value)


def test_fetch_needs_the_clusters_region() -> None:
    with pytest.raises(CommandError) as caught:
        parse("/images fetch nemo cluster=a4", context(region=None))
    assert str(caught.value).startswith(
        "a4 has no region in its config, so the guide's prebuilt images (one bucket per region: "
        "us, europe, asia) are not known there. Ask a trainbot admin to set region: for a4"
    )


def test_what_lands_must_be_an_image_the_person_may_then_run() -> None:
    with pytest.raises(CommandError) as caught:  # no custom-image rule covers the directory
        parse("/images import nvcr.io/nvidia/nemo:26.02 as x", context(dirs=("/shared/ok",)))
    assert str(caught.value).startswith(
        f"The image would be {IMAGES}/x.sqsh, which you could not then use: image="
        f"{IMAGES}/x.sqsh is not in a directory you may run images from on a3m (/shared/ok)."
    )
    with pytest.raises(CommandError) as caught:
        parse("/images fetch nemo", context(dirs=()))
    assert "Custom images are not allowed for you on a3m (policy.custom_images)" in str(
        caught.value
    )
    with pytest.raises(CommandError) as caught:
        parse("/images fetch nemo", context(allow=False))
    assert str(caught.value).startswith("a3m runs only the images its config names (nemo, ")
    with pytest.raises(CommandError) as caught:
        parse("/images fetch nemo cluster=a4", user="U0NOA4")
    assert "You may not launch on a4" in str(caught.value)
    ok = parse("/images import nvcr.io/nvidia/nemo:26.02 as x", context(
        image_dir="/shared/ok", dirs=("/shared/ok",)))  # fmt: skip
    assert ok.name == "x"


def test_the_target_is_in_the_image_directory_and_image_name_finds_it() -> None:
    ctx = context(image_dir="/shared/images")
    profile = ctx.clusters["a4"]
    job = plan_import(profile, "nvcr.io/nvidia/nemo:26.02", "nemo-26.02")
    assert job.target == "/shared/images/nemo-26.02.sqsh"
    assert job.source == "docker://nvcr.io#nvidia/nemo:26.02"
    assert profile.resolve_image("nemo-26.02", "nemo") == job.target
    assert profile.resolve_image("nemo", "nemo") == profile.images["nemo"]  # config names first
    assert build_profile("a4").image_directory == IMAGES  # default: <recipes_dir>/images
    fetch = plan_fetch(build_profile("a4", region="asia"), "nemo-rl")
    assert fetch.source == "gs://vmds-containers-asia/vmds_nemo_squashfs/nemo_rl-h20260302.sqsh"
    assert fetch.mounted == "/gcs/vmds-containers-asia/vmds_nemo_squashfs/nemo_rl-h20260302.sqsh"
    assert fetch.target == f"{IMAGES}/nemo_rl-h20260302.sqsh"


def test_image_equals_a_name_resolves_to_the_image_directory() -> None:
    ctx = context(image_dir="/shared/images", dirs=("/shared/images",))
    request = parse_line("/train sft llama3p1_8b cluster=a4 image=nemo-26.02",
                         user=User(id="U0ALICE", name="alice"), context=ctx)  # fmt: skip
    assert getattr(request, "image", None) == "/shared/images/nemo-26.02.sqsh"
    # a slip of a configured name is such a path too: pre-flight says it is not there
    request = parse_line("/train sft llama3p1_8b cluster=a4 image=nemo2",
                         user=User(id="U0ALICE", name="alice"), context=ctx)  # fmt: skip
    assert getattr(request, "image", None) == "/shared/images/nemo2.sqsh"
    with pytest.raises(CommandError) as caught:  # where only the configured names run
        parse_line("/train sft llama3p1_8b cluster=a4 image=nemo2",
                   user=User(id="U0ALICE", name="alice"), context=context(allow=False))  # fmt: skip
    assert "Did you mean nemo?" in str(caught.value)
