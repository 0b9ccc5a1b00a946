"""One input distribution per run: what the policy is shown in its first turn.

Imported public data (the Spec-o3 cold-start ShareGPT set, SpecVI-Bench verl rows) ships its own
system prompt, T0 and I0; specvet has its own (``agent.inspection_tasks``, I0 drawn by
``agent.tool``). A run picks one, records it in the checkpoint's lineage and applies it to SFT,
GRPO and evaluation alike:

- ``specvet``: specvet's system prompt and T0 everywhere; I0 and tool plots drawn by specvet.
  SFT replaces the prompts of imported demonstrations with specvet's; their images cannot be
  re-drawn (the ShareGPT set ships pictures, not spectra), so a demonstration whose pictures are
  not specvet's size is refused. GRPO builds specvet's prompt and I0 for every row. Evaluation
  re-renders (``--input-distribution specvet``).
- ``dataset``: the data as shipped. SFT keeps each demonstration's prompts and pictures; GRPO
  shows verl rows their own system prompt, T0 and I0 (tool plots are specvet's, the only tool
  there is); evaluation shows SpecVI-Bench rows theirs. Rows specvet generates itself
  (SpecVI-mini, curation exports) ship specvet's prompts, so they look the same either way.

A run that would mix them is refused: SFT or GRPO starting from a checkpoint trained on the
other distribution, and evaluation of a checkpoint on the other one. Checkpoints from before
this choice existed record none and are accepted with either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.trajectory import Trajectory

SPECVET = "specvet"
DATASET = "dataset"
INPUT_DISTRIBUTIONS = (SPECVET, DATASET)
DESCRIPTIONS = {
    SPECVET: "specvet's system prompt, T0 and rendering of I0 (agent.inspection_tasks, agent.tool)",
    DATASET: "each row's own system prompt, T0 and I0 as the dataset ships them; tool plots by "
    "specvet",
}


class InputDistributionError(ValueError):
    """A run that would train or evaluate on two input distributions."""


def check_choice(value: str) -> str:
    if value not in INPUT_DISTRIBUTIONS:
        raise InputDistributionError(
            f"input_distribution must be one of {list(INPUT_DISTRIBUTIONS)}; got {value!r}"
        )
    return value


def record(value: str) -> dict[str, str]:
    """The lineage entry of a run's choice (kept under the dataset's sources)."""
    return {"input_distribution": check_choice(value), "inputs": DESCRIPTIONS[value]}


def recorded_distribution(checkpoint: str | Path) -> str | None:
    """The input distribution a checkpoint was trained on: its own lineage's, else the nearest
    base's; None for a checkpoint without lineage or from before the choice was recorded."""
    from training.checkpoint import LineageError, load_lineage

    try:
        lineage = load_lineage(checkpoint).to_dict()
    except LineageError:
        return None
    current: dict[str, Any] | None = lineage
    while current:
        sources = (current.get("dataset") or {}).get("sources") or {}
        if sources.get("input_distribution") in INPUT_DISTRIBUTIONS:
            return str(sources["input_distribution"])
        current = current.get("base_lineage")
    return None


def refuse_mixing(*, checkpoint: str | Path, chosen: str, what: str) -> None:
    """Raise when ``checkpoint`` was trained on another distribution than ``chosen``."""
    recorded = recorded_distribution(checkpoint)
    if recorded is not None and recorded != check_choice(chosen):
        raise InputDistributionError(
            f"{what} would mix input distributions: {checkpoint} was trained on "
            f"{recorded!r} inputs ({DESCRIPTIONS[recorded]}) but this run uses {chosen!r} "
            f"({DESCRIPTIONS[chosen]}). Use input_distribution {recorded!r} for the whole run, "
            "or start again from a checkpoint trained on the same inputs."
        )


def with_specvet_prompts(trajectory: Trajectory) -> Trajectory:
    """An imported demonstration shown with specvet's system prompt and T0; refused when its
    pictures are not specvet's size (they cannot be re-drawn without the spectrum)."""
    from agent.inspection_tasks import build_prompt, get_task, system_prompt
    from agent.tool import IMAGE_SIZE

    sizes = {_png_size(png) for png in trajectory.images()}
    if sizes - {IMAGE_SIZE}:
        shown = ", ".join(sorted(f"{w}x{h}" for w, h in sizes - {IMAGE_SIZE}))
        name = trajectory.meta.get("source_name") or trajectory.spectrum.object_id
        raise InputDistributionError(
            f"demonstration {name}#{trajectory.meta.get('sample_index', trajectory.id)} shows "
            f"pictures at {shown} pixels, specvet draws {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]}: with "
            "input_distribution 'specvet' its images would not be specvet's, and they cannot be "
            "re-drawn without the spectrum. Train this run with input_distribution 'dataset' "
            "(then GRPO and evaluation use the dataset's prompts and I0 too)."
        )
    data = trajectory.to_dict()
    data["system_prompt"] = system_prompt()
    data["user_prompt"] = build_prompt(get_task(trajectory.task))
    data["meta"] = {**trajectory.meta, "input_distribution": SPECVET}
    result = Trajectory.from_dict(data)
    result.finalize(trajectory.stop_reason)
    return result


def _png_size(png: bytes) -> tuple[int, int]:
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def evaluation_distribution(*, checkpoint: str | Path | None, chosen: str | None) -> str:
    """What an evaluation shows a policy: ``chosen``, else what ``checkpoint`` was trained on,
    else ``dataset`` (SpecVI-Bench rows as shipped, so scores compare with published ones).
    A choice other than the checkpoint's is refused."""
    recorded = recorded_distribution(checkpoint) if checkpoint is not None else None
    if chosen is None:
        return recorded or DATASET
    if checkpoint is not None:
        refuse_mixing(checkpoint=checkpoint, chosen=chosen, what="evaluation")
    return check_choice(chosen)
