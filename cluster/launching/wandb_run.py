"""One W&B run per launch: the environment every attempt of a launch is given.

Every framework the bot drives starts W&B with ``wandb.init`` and leaves the run's
id, resume mode, group, tags and notes to W&B's own environment variables (NeMo 2
through Lightning's ``WandbLogger``, NeMo-RL through ``logger.wandb`` passed on to
``wandb.init``, Megatron-Bridge through Megatron's ``wandb_exp_name``/``wandb_project``,
none of which sets ``id``), so one set of variables reaches all three:

- ``WANDB_RUN_ID``: derived from the launch id alone, so a retry, a requeue (the
  same job run again) and a reroute to another cluster write to the same run;
- ``WANDB_RESUME=allow``: the first attempt creates the run, later ones resume it;
- ``WANDB_RUN_GROUP``: the sweep a member belongs to (the launch itself otherwise);
- ``WANDB_TAGS``: the launch, the cluster and the owner (comma separated);
- ``WANDB_NOTES``: the ``/train`` line.

Pure: the values are built here; :mod:`cluster.launching.launch` exports them in the script it
sends on stdin. No secret is among them (``WANDB_API_KEY`` stays a job secret).
"""

from __future__ import annotations

import re

RUN_ID_PREFIX = "trainbot-"
NOTES_MAX = 1000  # W&B keeps notes as markdown; a /train line is far shorter
TAG_MAX = 64  # W&B refuses a tag longer than 64 characters

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9._@:-]")


def run_id(launch_id: str) -> str:
    """The W&B run id of every attempt of ``launch_id`` (W&B allows letters, digits, - and _)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", launch_id).lower()
    return f"{RUN_ID_PREFIX}{safe}"


def safe_tag(value: str) -> str:
    """``value`` as one W&B tag: no comma (the list separator), no space, at most 64 chars."""
    return _TAG_UNSAFE.sub("_", value.strip())[:TAG_MAX]


def run_env(
    launch_id: str,
    *,
    cluster: str,
    owner: str,
    sweep: str = "",
    notes: str = "",
) -> dict[str, str]:
    """The W&B variables for one attempt of a launch (see the module text)."""
    tags = [f"launch:{launch_id}", f"cluster:{cluster}"]
    if owner:
        tags.append(f"owner:{owner}")
    env = {
        "WANDB_RUN_ID": run_id(launch_id),
        "WANDB_RESUME": "allow",
        "WANDB_RUN_GROUP": sweep or launch_id,
        "WANDB_TAGS": ",".join(t for t in (safe_tag(t) for t in tags) if t),
    }
    text = " ".join(notes.split())[:NOTES_MAX]  # one line: no newline reaches the job's env
    if text:
        env["WANDB_NOTES"] = text
    return env
