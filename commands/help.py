"""Help and recipe-list text. Plain text with Slack-style `code` marks; no I/O."""

from __future__ import annotations

from cluster.launching.spec import interactive_framework
from cluster.site.framework_registry import frameworks, workloads
from commands.context import CommandContext
from commands.request_fields import HelpTopic

USAGE: dict[HelpTopic, str] = {
    "train": "/train <workload> <model> [key=value ...]",
    "interactive": "/train interactive [nodes=N] [cluster=C] | /train interactive node=<n>",
    "recipes": "/train recipes [workload]",
    "attach": "/attach <job> [cluster=C]",
    "jobs": "/jobs [all] [history [days=N]] [cluster=C] | /jobs watching",
    "cancel": "/cancel <job> [cluster=C]",
    "logs": "/logs <job> [lines=N] | /logs <job> plot",
    "clusters": "/clusters [cluster=C]",
    "usage": "/usage [me|@person|team=<group>|cluster=C] [week|month|days=N] [csv=true]",
    "watch": "/watch <job> [cluster=C]",
    "unwatch": "/unwatch <job> [cluster=C]",
    "checkpoints": "/checkpoints <job> [keep=K] [cluster=C]",
    "images": (
        "/images [cluster=C] | /images fetch <framework> [cluster=C] | "
        "/images import <docker-uri> as <name> [cluster=C]"
    ),
}

_JOB = (
    "<job> is a launch id such as L-7f3a9c, a sweep id such as S-41c2aa (/cancel: every "
    "member, after one confirm) or a Slurm job id such as 4187; "
    "add cluster=C when a Slurm job id could be on more than one cluster."
)

_DETAILS: dict[HelpTopic, str] = {
    "train": (
        "Launch a recipe. Workloads: {workloads}.\n"
        "Keys:\n"
        "  cluster=C        where to run (default: {default}); cluster=auto: of the clusters\n"
        "                   you may use that fit, where Slurm says it starts first\n"
        "  nodes=N          nodes of 8 GPUs (default 1)\n"
        "  partition=P      Slurm partition (default: the cluster's)\n"
        "  time=T           time limit: MM, HH:MM:SS or D-HH:MM:SS\n"
        "  name=N           job name: letters, digits, - _ .\n"
        "  image=I          an image name of the cluster, a path to a .sqsh file or a registry\n"
        "                   reference (nvcr.io/nvidia/nemo:26.02, nvcr.io#nvidia/nemo-rl:v0.5.0,\n"
        "                   docker://...: pyxis imports it at the start, minutes) where policy\n"
        "                   allows you custom images (usually without job secrets)\n"
        "  framework=F      {frameworks}\n"
        "  dry_run=true     show the exact commands and pre-flight checks, launch nothing\n"
        "  over_budget=true admins only: launch even past the weekly GPU-hour budget\n"
        '  at=T             start at a time in your time zone: at=22:00, at="tomorrow 06:30"\n'
        "                   or at=2026-12-24T08:00; pre-flight runs when it is due\n"
        "  after=J[:ok|:any] start when launch (or Slurm job) J has ended for good, retries\n"
        "                   included: :ok (default) only if it completed, :any whatever its end\n"
        "  from=J           start from launch J's newest complete checkpoint (same cluster;\n"
        "                   NeMo: weights for another workload, the whole state for the same;\n"
        "                   Megatron-Bridge: checkpoint.load or checkpoint.pretrained_checkpoint)\n"
        "                   only your own launches (or where policy.start_from lets you)\n"
        "  from_running=yes start from= a launch that still runs (its newest complete\n"
        "                   checkpoint when this one goes); without it, a running one is refused\n"
        "  from=J@S         start from launch J's checkpoint of step S instead of its newest;\n"
        "                   a step J never saved is refused with the steps it did save\n"
        "  then=export      once it completed: its newest checkpoint to Hugging Face format\n"
        "                   (the framework's own converter; Megatron-Bridge), a Slurm job of\n"
        "                   one node in its container; the thread gets the exported path\n"
        "  then=eval:T,...  export, then the cluster's evaluation recipe on tasks T (for\n"
        "                   example then=eval:arc_easy,hellaswag); the thread gets the results\n"
        "                   table, with the change against from='s launch or the sweep's others\n"
        "{framework_lines}\n"
        "The answer says when Slurm expects the job to start and about how many\n"
        "GPU-hours it will use (and, where policy sets a budget, what is left of it).\n"
        "Recipe overrides (see /train recipes) go the same way: trainer.max_steps=100.\n"
        "A sweep: a comma list in nodes or a recipe override launches every combination,\n"
        "  optim.config.lr=1e-5,3e-5 trainer.max_steps=100,200 is 4 launches (at most\n"
        "  {max_sweep}); seeds=N repeats each with N seeds where the recipe has a seed\n"
        "  override. The answer gives the count and total GPU-hours first; with dry_run=true\n"
        "  it lists the members. One thread holds a table of them and, at the end, a\n"
        "  comparison by final loss and their loss curves in one picture.\n"
        "Example: /train sft llama3p1_8b nodes=2 cluster={default}"
    ),
    "interactive": (
        "Allocate nodes for an interactive {interactive} session; /attach shows how to get in.\n"
        "Keys: cluster, nodes, partition, time, name, image, dry_run, over_budget, at, after "
        "(as for /train).\n"
        "/train interactive node=<n> [cluster=C] gives you the command for a shell on node n\n"
        "(from 0) of your running interactive job, as the guide's nemorlinteractive <n>.\n"
        "Example: /train interactive nodes=1 cluster={default}"
    ),
    "recipes": "List what /train can launch, with the overrides each recipe allows.",
    "attach": "How to attach to your interactive job (only you see it). " + _JOB,
    "jobs": (
        "Your active launches, one line each, with what a waiting one waits for (at=, "
        "after=), a sweep's members grouped under it; /jobs all for everyone's on the "
        "clusters /clusters shows you; "
        "/jobs history [days=N] for your finished ones "
        "(admins: /jobs all history); /jobs watching for the launches you watch."
    ),
    "cancel": "Cancel a job after you confirm. " + _JOB,
    "watch": (
        "Follow a launch you may see (as for /logs) by DM: its start, checkpoints, end, "
        "failure or hang, as your App Home notification settings choose; quiet hours "
        "hold them. /jobs watching lists what you watch. " + _JOB
    ),
    "unwatch": "Stop getting DMs about a launch you watch. " + _JOB,
    "checkpoints": (
        "A launch's complete checkpoints (of a launch you may see, as for /logs): each "
        "one's step, the validation loss the log gave at or before it and its size, the "
        "best and the last marked, the launch's total and its owner's; from=<job>@<step> "
        "starts a new /train from one. Export and Evaluate (a run that completed) convert "
        "the newest to Hugging Face format and evaluate it, as then= does; each of the newest "
        "five has Resume from it (the same /train from=<job>@<step>), New run from it (the "
        "launch form, filled in) and Export (that one). Its owner (or an "
        "admin) gets a button that deletes all but the best K (keep=K, default 1) and the "
        "last, after a confirm; the thread records it. " + _JOB
    ),
    "images": (
        "Each cluster's images: the .sqsh files in its recipes checkout and its config (size,\n"
        "date, which framework uses each by default), its registry images (pyxis imports\n"
        "them at the start), and the guide's prebuilt images for its region (the gs:// path\n"
        "to copy, and whether the /gcs/ mount has it). Use one with image=<name or path>.\n"
        "/images fetch <framework> copies the prebuilt image for the cluster's region (or\n"
        "links the mounted /gcs/ path); /images import <docker-uri> as <name> converts a\n"
        "registry image with enroot (the site's registry credentials: your enroot\n"
        "credentials file on the cluster, never the bot's). Each is a Slurm job with a\n"
        "thread of its own that says when the image is ready in the cluster's image\n"
        "directory; then image=<name> uses it."
    ),
    "logs": "The last lines of a job's log (default 50, at most 5000), or its loss curve. " + _JOB,
    "clusters": (
        "Each cluster's partitions with idle and total nodes, free GPUs, queue length, and "
        "how long a 1-, 2- and 4-node job would wait to start there (Slurm's own estimate)."
    ),
    "usage": (
        "GPU-hours charged (what Slurm's accounting recorded) per person, cluster and day, "
        "with a bar chart; cost where a price per GPU-hour is configured. Default: your "
        "own, this ISO week. Team leads see their team (team=S...), admins anyone and any "
        "cluster. csv=true attaches the rows as a CSV file."
    ),
}


def _workloads_text() -> str:
    """``pretrain, cpt, sft (NeMo); dpo, grpo, rm (NeMo-RL); sft on NeMo-RL with ...``."""
    fws = frameworks().values()
    parts = [f"{', '.join(fw.default_for)} ({fw.label})" for fw in fws if fw.default_for]
    for fw in fws:
        others = [w for w in fw.workloads if w not in fw.default_for]
        if others:
            parts.append(f"{', '.join(others)} on {fw.label} with framework={fw.name}")
    return "; ".join(parts)


def _framework_lines(context: CommandContext) -> str:
    """Each framework with its default image on the default cluster, then the recipe each
    Megatron-Bridge entry runs (the catalog's, so a site's own recipes show too)."""
    profile = context.default_profile() if context.clusters else None
    lines = ["Frameworks (default image on the default cluster):"]
    for fw in frameworks().values():
        image = profile.images.get(fw.name, "") if profile is not None else ""
        if image.startswith(("/", "~")):
            image = image.rsplit("/", 1)[-1]
        lines.append(f"  {fw.name:<16} {fw.label}: {image}")
    by_model: dict[str, list[str]] = {}
    for entry in context.catalog.entries:
        if name := recipe_name(entry.args):
            by_model.setdefault(entry.model, []).append(f"{entry.workload} {name}")
    if by_model:
        lines.append("Megatron-Bridge recipes (megatron.bridge.recipes; peft runs LoRA):")
        lines += [f"  {model}: {', '.join(found)}" for model, found in by_model.items()]
        lines.append(
            "A site adds its own recipe under recipes: in trainbot.yaml (framework, workload,\n"
            "  model, script: run_recipe.py, args: [recipe=<function name>]); see the docs."
        )
    return "\n".join(lines)


def recipe_name(args: tuple[str, ...]) -> str:
    """The Megatron-Bridge recipe function an entry's args name (``recipe=...``), or ""."""
    return next((a.split("=", 1)[1] for a in args if a.startswith("recipe=")), "")


def help_text(context: CommandContext, topic: HelpTopic | None = None) -> str:
    """The help for one topic, or an overview of every command."""
    default = context.default_profile().name if context.clusters else "(none configured)"
    if topic is not None:
        details = _DETAILS[topic].format(
            default=default,
            workloads=_workloads_text(),
            frameworks=" or ".join(frameworks()),
            interactive=interactive_framework().label,
            max_sweep=context.policy.max_sweep,
            framework_lines=_framework_lines(context) if topic == "train" else "",
        )
        return f"`{USAGE[topic]}`\n{details}"
    lines = ["trainbot commands:"]
    lines += [f"• `{usage}`" for usage in USAGE.values()]
    lines.append(f"Clusters: {', '.join(context.cluster_names) or '(none)'} (default {default}).")
    lines.append(
        "You are mentioned in a launch's thread when it needs you or ends; which events "
        "also come as DMs, and quiet hours, are set in the App Home."
    )
    lines.append("More on one command: /train help <command>, e.g. /train help logs.")
    return "\n".join(lines)


def recipes_text(context: CommandContext, workload: str | None = None) -> str:
    """The catalog, grouped by workload, one line per model and framework."""
    catalog = context.catalog
    lines: list[str] = []
    for name in workloads():
        if workload not in (None, name):
            continue
        entries = [e for e in catalog.entries if e.workload == name]
        if not entries:
            continue
        lines.append(f"*{name}*")
        for entry in entries:
            keys = ", ".join(entry.overrides) or "none"
            what = recipe_name(entry.args) or entry.script_path
            lines.append(f"  {entry.model} ({entry.framework}: {what}) overrides: {keys}")
    if not lines:
        return "No recipes match. /train recipes lists them all."
    lines.append("Example: /train sft llama3p1_8b nodes=2 trainer.max_steps=100")
    return "\n".join(lines)
