"""Container images: a squashfs file on the login node, or a registry reference. Pure.

pyxis (NVIDIA/pyxis ``--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH``) runs a
squashfs file in place, and imports anything else from a registry with enroot when the
job starts (``enroot import docker://[REGISTRY#]IMAGE[:TAG]``: minutes for a NeMo image,
on each node's first start). A registry reference is accepted in three spellings:
``docker://nvcr.io#nvidia/nemo:26.02`` (enroot's URI), ``nvcr.io#nvidia/nemo:26.02``
(pyxis's) and ``nvcr.io/nvidia/nemo:26.02`` (the registry's own, which enroot would read
as a Docker Hub path: :func:`pyxis_image` puts the ``#`` after the host). Credentials
for a private registry are the site's: enroot reads them from its credentials file
(``$ENROOT_CONFIG_PATH/.credentials``, netrc format) on the compute node; trainbot never
holds or passes them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from cluster.site.profile_fields import check_remote_path

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?)"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*){0,8}"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
REGISTRY_REF_RE = re.compile(
    rf"(?P<scheme>docker://)?(?:(?P<host>{_HOST})(?P<sep>[#/]))?(?P<path>{_PATH})"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>sha256:[a-f0-9]{{64}}))?"
)
#: The first-start note a launch on a registry image gets.
IMPORT_NOTE = (
    "pyxis imports it from the registry when the job starts (minutes on each node's first "
    "start); a private registry's credentials are the site's enroot credentials file, "
    "never trainbot's"
)


def is_registry_ref(value: str) -> bool:
    """Whether ``value`` is a registry reference (not a path, not a bare image name)."""
    if not value or value.startswith(("/", "~", ".")) or value.endswith(".sqsh"):
        return False
    match = REGISTRY_REF_RE.fullmatch(value)
    if match is None:
        return False
    # A bare word ("nemo") is a name in a profile's images, not Docker Hub's "nemo".
    return bool(match["scheme"] or match["sep"] or "/" in match["path"] or match["tag"])


def pyxis_image(value: str) -> str:
    """A registry reference as pyxis's ``--container-image`` takes it: no scheme, ``#``
    between the registry host and the path (``nvcr.io/nvidia/nemo:26.02`` ->
    ``nvcr.io#nvidia/nemo:26.02``); Docker Hub paths stay as they are."""
    ref = value.removeprefix("docker://")
    if "#" in ref:
        return ref
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def enroot_uri(value: str) -> str:
    """The reference as ``enroot import`` takes it: ``docker://nvcr.io#nvidia/nemo:26.02``."""
    return f"docker://{pyxis_image(value)}"


def check_image_ref(value: str) -> str:
    """An image a profile or a launch names: a login-node path (absolute or ``~/``) or a
    registry reference; ValueError saying which forms are accepted."""
    if is_registry_ref(value):
        return value
    try:
        return check_remote_path(value)
    except ValueError:
        raise ValueError(
            f"must be a path on the login node (absolute or ~/, a .sqsh file) or a registry "
            f"reference (nvcr.io/nvidia/nemo:26.02, nvcr.io#nvidia/nemo:26.02, "
            f"docker://...) (got {value!r})"
        ) from None


#: A profile's image: a login-node path or a registry reference.
ImageRef = Annotated[str, AfterValidator(check_image_ref)]
