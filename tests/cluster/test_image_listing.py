"""/images: a cluster's image files, registry images and the guide's prebuilt ones, listed
over the dev cluster's real SSH and rendered for the thread."""

from __future__ import annotations

import pytest

from bot.core.images import listing_text
from cluster.images.listing import build_listing, list_images, prebuilt_for
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool


def test_the_listing_names_sizes_defaults_registry_and_the_regions_prebuilt() -> None:
    profile = ClusterProfile.model_validate(
        {
            "name": "a4",
            "type": "hcc-a4",
            "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
            "partition": "a4",
            "max_nodes": 4,
            "region": "europe",
        }
    )
    raw = {
        "named": {
            "~/vertex-oss-training/nemo/nemo-20250721.sqsh": {"size": 23_400_000_000, "mtime": 0},
            "~/vertex-oss-training/nemo_rl/nemo_rl-h20260302.sqsh": None,
        },
        "files": {"nemo_rl/nemo_rl-h20250923.sqsh": {"size": 31_000_000_000, "mtime": 1758585600}},
        "mounted": {"/gcs/vmds-containers-europe/vmds_nemo_squashfs/nemo-20250721.sqsh": True},
        "made": {"nemo-26.02.sqsh": {"size": 20_000_000_000, "mtime": 0}, "../x.sqsh": None},
    }
    text = listing_text(build_listing(profile, raw), 0.0)
    assert (
        "`~/vertex-oss-training/nemo/nemo-20250721.sqsh` · 23.4 GB · ? · default for nemo" in text
    )
    assert "nemo_rl-h20260302.sqsh` · missing · default for nemo-rl" in text
    assert "nemo_rl-h20250923.sqsh` · 31.0 GB · 2025-09-23" in text
    # what /images import and fetch made, with the image= that picks it (no odd names)
    assert "`~/vertex-oss-training/images/nemo-26.02.sqsh` · 20.0 GB · ? · image=nemo-26.02" in text
    assert "../x" not in text
    assert "`nvcr.io/nvidia/nemo:26.02` (megatron-bridge): a registry image; pyxis imports" in text
    assert (
        "nemo: `gs://vmds-containers-europe/vmds_nemo_squashfs/nemo-20250721.sqsh`, mounted at "
        "`/gcs/vmds-containers-europe/vmds_nemo_squashfs/nemo-20250721.sqsh`"
    ) in text
    assert (
        "nemo-rl: `gs://vmds-containers-europe/vmds_nemo_squashfs/nemo_rl-h20260302.sqsh`, "
        "not mounted here; copy with `gcloud storage cp"
    ) in text
    assert [fw for fw, _, _ in prebuilt_for("us")] == ["nemo", "nemo-rl"]
    bad = build_listing(profile, {"named": "x", "files": ["y"], "mounted": 3})  # from a login node
    assert bad.files == () and bad.region == "europe"  # nothing read, nothing crashed


@pytest.mark.devcluster
async def test_the_dev_clusters_images_are_listed_over_ssh(
    pool: SSHPool, dev_profile: ClusterProfile
) -> None:
    listing = await list_images(pool, dev_profile)
    by_path = {f.path: f for f in listing.files}
    nemo = by_path["~/vertex-oss-training/nemo/nemo-20250721.sqsh"]
    assert nemo.size_bytes and nemo.mtime and nemo.default_for == ("nemo",)
    assert "~/vertex-oss-training/nemo_rl/nemo_rl-h20250923.sqsh" in by_path  # the older one
    assert by_path["~/vertex-oss-training/nemo_rl/nemo_rl-h20260302.sqsh"].default_for == (
        "nemo-rl",
    )
    assert listing.registry == (("megatron-bridge", "nvcr.io/nvidia/nemo:26.02"),)
