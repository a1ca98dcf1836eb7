"""What images a cluster has, for ``/images``: the squashfs files in its recipes checkout
and the ones its profile names (size, date, which framework uses each by default), its
registry images, and the guide's prebuilt images for the cluster's region.

The guide has people copy the prebuilt image for their region
(``gcloud storage cp gs://vmds-containers-<region>/vmds_nemo_squashfs/<image>``) or use it
in place where the bucket is mounted (``/gcs/vmds-containers-<region>/...``). One SSH round
trip (``images_remote.py``); the listing is plain data, rendered by the bot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.site.framework_registry import frameworks
from cluster.site.image_refs import is_registry_ref
from cluster.site.profile_fields import IMAGE_NAME_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import join_remote, run_remote_python

LISTING_TIMEOUT_S = 20.0
#: The guide's prebuilt images, by framework, in each region's bucket.
PREBUILT = {"nemo": "nemo-20250721.sqsh", "nemo-rl": "nemo_rl-h20260302.sqsh"}
BUCKET_DIR = "vmds_nemo_squashfs"


@dataclass(frozen=True)
class ImageFile:
    """One image: where it is, how big, when written, which frameworks use it by default."""

    path: str  # as the profile names it, or relative to the recipes dir
    size_bytes: int | None  # None: it is not there
    mtime: int = 0
    default_for: tuple[str, ...] = ()
    name: str = ""  # an image of the image directory: image=<name> picks it


@dataclass(frozen=True)
class Prebuilt:
    """A prebuilt image the guide names for the cluster's region."""

    framework: str
    bucket_uri: str  # gs://vmds-containers-<region>/vmds_nemo_squashfs/<image>
    mounted_path: str  # /gcs/vmds-containers-<region>/vmds_nemo_squashfs/<image>
    mounted: bool  # whether that path exists on the login node


@dataclass(frozen=True)
class ImageListing:
    cluster: str
    files: tuple[ImageFile, ...]
    registry: tuple[tuple[str, str], ...] = ()  # (name in images:, reference)
    prebuilt: tuple[Prebuilt, ...] = ()
    region: str = ""


def prebuilt_for(region: str) -> list[tuple[str, str, str]]:
    """(framework, bucket URI, mounted path) of the guide's images for ``region``."""
    bucket = f"vmds-containers-{region}"
    return [
        (fw, f"gs://{bucket}/{BUCKET_DIR}/{image}", f"/gcs/{bucket}/{BUCKET_DIR}/{image}")
        for fw, image in PREBUILT.items()
    ]


def listing_payload(profile: ClusterProfile) -> dict[str, object]:
    named = [p for p in profile.images.values() if not is_registry_ref(p)]
    region = profile.region or ""
    return {
        "recipes_dir": profile.recipes_dir,
        "globs": [f"{fw.subdir}/*.sqsh" for fw in frameworks().values()] + ["*.sqsh"],
        "named": named,
        "mounted": [mounted for _, _, mounted in prebuilt_for(region)] if region else [],
        "image_dir": profile.image_directory,
    }


def build_listing(profile: ClusterProfile, raw: dict[str, object]) -> ImageListing:
    """The listing from the remote half's answer (pure)."""
    defaults: dict[str, list[str]] = {}
    for name, image in profile.images.items():
        if name in frameworks():
            defaults.setdefault(image, []).append(name)
    found: dict[str, ImageFile] = {}
    named, files, mounted = (_dict(raw, key) for key in ("named", "files", "mounted"))
    for path, stat in named.items():
        found[path] = _file(path, stat, defaults.get(path, []))
    for rel, stat in files.items():
        path = join_remote(profile.recipes_dir, str(rel))
        if path not in found:
            found[path] = _file(path, stat, defaults.get(path, []))
    for file_name, stat in sorted(_dict(raw, "made").items()):
        name = str(file_name).removesuffix(".sqsh")
        path = join_remote(profile.image_directory, str(file_name))
        if path not in found and re.fullmatch(IMAGE_NAME_PATTERN, name):
            made = _file(path, stat, defaults.get(path, []))
            found[path] = ImageFile(made.path, made.size_bytes, made.mtime, made.default_for, name)
    region = profile.region or ""
    prebuilt = tuple(
        Prebuilt(fw, uri, path, bool(mounted.get(path)))
        for fw, uri, path in (prebuilt_for(region) if region else [])
    )
    registry = tuple((n, i) for n, i in profile.images.items() if is_registry_ref(i))
    return ImageListing(profile.name, tuple(found.values()), registry, prebuilt, region)


def _dict(raw: dict[str, object], key: str) -> dict[str, object]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _file(path: str, stat: object, default_for: list[str]) -> ImageFile:
    if not isinstance(stat, dict):
        return ImageFile(path, None, 0, tuple(default_for))
    size, mtime = stat.get("size"), stat.get("mtime")
    return ImageFile(
        path,
        size if isinstance(size, int) else None,
        mtime if isinstance(mtime, int) else 0,
        tuple(default_for),
    )


async def list_images(pool: SSHPool, profile: ClusterProfile) -> ImageListing:
    raw = await run_remote_python(
        pool,
        profile.login,
        "images/listing_remote.py",
        listing_payload(profile),
        timeout_s=LISTING_TIMEOUT_S,
        cluster=profile.name,
    )
    return build_listing(profile, raw)
