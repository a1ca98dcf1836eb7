"""``/images [cluster=C]``: parsing (no I/O)."""

from __future__ import annotations

from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.parse import Args
from commands.requests import ImagesRequest
from commands.train import check_keys

LATER = ("fetch", "import")


def parse_images(args: Args, user: User, context: CommandContext) -> ImagesRequest:
    """``/images [cluster=C]``; ``fetch`` and ``import`` are named, and refused plainly."""
    if args.words:
        word = args.words[0].lower()
        if word in LATER:
            raise CommandError(
                f"/images {word} is not available yet: trainbot lists images but does not "
                "copy or convert them. Copy the prebuilt image as the guide says (the "
                "listing names its gs:// and /gcs/ paths), or convert with enroot, then use "
                "image=<path>."
            )
        raise CommandError(f"/images takes no word {word!r}. Usage: /images [cluster=C].")
    check_keys(args, ("cluster",), "/images")
    cluster = args.pairs.get("cluster")
    return ImagesRequest(cluster=None if cluster is None else context.profile(cluster).name)
