"""The image listing's remote half: run on the login node as ``python3 -`` (stdlib only).

``main(payload)`` returns, for every squashfs file the globs match under the recipes
directory and every file the profile names, its size and modification time, and whether
each mounted prebuilt path exists; and the images in the cluster's image directory (what
``/images import`` and ``fetch`` made). See ``cluster.images.listing``.
"""

from __future__ import annotations

import glob
import os
from typing import Any

MAX_FILES = 200


def _stat(path: str) -> dict[str, Any] | None:
    try:
        found = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return {"size": found.st_size, "mtime": int(found.st_mtime)}


def main(payload: dict[str, Any]) -> dict[str, Any]:
    base = os.path.expanduser(str(payload.get("recipes_dir") or "~"))
    files: dict[str, Any] = {}
    for pattern in payload.get("globs", []):
        for path in sorted(glob.glob(os.path.join(base, pattern)))[:MAX_FILES]:
            if os.path.isfile(path) and len(files) < MAX_FILES:
                files[os.path.relpath(path, base)] = _stat(path)
    named = {str(p): _stat(str(p)) for p in payload.get("named", [])[:MAX_FILES]}
    mounted = {str(p): os.path.isfile(str(p)) for p in payload.get("mounted", [])[:20]}
    made: dict[str, Any] = {}
    image_dir = str(payload.get("image_dir") or "")
    if image_dir:
        for path in sorted(glob.glob(os.path.join(os.path.expanduser(image_dir), "*.sqsh"))):
            if os.path.isfile(path) and len(made) < MAX_FILES:
                made[os.path.basename(path)] = _stat(path)
    return {"files": files, "named": named, "mounted": mounted, "made": made}
