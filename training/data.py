"""Training rows: SFT conversations from accepted trajectories, GRPO prompts from labelled spectra.

SFT rows are TRL conversational VLM examples (ml_path.md section 1): ``messages`` with
``{"type": "image"}`` placeholders and ``images`` (PIL), each tool result a user turn
``<tool_response>\\n[image]text\\n</tool_response>``, exactly ``agent.formats.to_trl_example``.
Rows longer than the token budget are dropped and reported, never truncated (cutting image
tokens breaks the image/token match).

GRPO rows hold the prompt the agent would see (system prompt, then I0 and T0, built by the same
code as ``agent.rollout.inspect``), the I0 image, the label, the task and the spectrum arrays the
environment needs to rebuild the spectrum (``spectrum_*`` columns, plain lists). With the run's
input distribution ``specvet`` (``training.inputs``) I0 is re-rendered with the agent's tool, also
for imported SpecVI-Bench rows, so training sees the same picture the agent will see at
inference; with ``dataset`` an imported row keeps its own prompts and I0 (``LabelledSpectrum``'s
``opening``). The run's sources record the choice, the renderer, and how many imported rows
carried a prompt of their own (``VerlInputs``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.formats import (
    from_verl_row,
    read_verl_parquet,
    to_trl_example,
)
from agent.inspection_tasks import Task, build_prompt, get_task, system_prompt
from agent.parsing import PREDICTIONS, TOOL_NAME
from agent.rollout import NO_TOOL_PROMPT_NOTE, inspect
from agent.spectra import Spectrum
from agent.tool import SpectralVisualizationTool
from agent.trajectory import ImageRef, SpectrumRef, Trajectory, TrajectoryFormatError

SPECTRUM_COLUMNS = (
    "spectrum_wavelength",
    "spectrum_flux",
    "spectrum_ivar",
    "spectrum_mask",
    "spectrum_redshift",
    "spectrum_object_id",
    "spectrum_survey",
    "spectrum_source",
)
RL_COLUMNS = ("prompt", "images", "ground_truth", "task", "sample_id", *SPECTRUM_COLUMNS)
VERSION_CHARS = 16


class TrainingDataError(ValueError):
    """Training input that cannot be turned into rows; the message names the input and why."""


# --- SFT ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DroppedRow:
    trajectory_id: str
    tokens: int


@dataclass(frozen=True)
class SFTDataReport:
    rows: int  # rows kept
    dropped: list[DroppedRow]
    max_length: int | None
    version: str  # dataset_version of the kept rows

    @property
    def n_dropped(self) -> int:
        return len(self.dropped)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "dropped": [
                {"trajectory_id": d.trajectory_id, "tokens": d.tokens} for d in self.dropped
            ],
            "max_length": self.max_length,
            "version": self.version,
        }


@dataclass
class SFTData:
    dataset: Any  # datasets.Dataset with columns messages, images
    report: SFTDataReport
    trajectory_ids: list[str] = field(default_factory=list)  # of the kept rows, in order


def load_trajectories_jsonl(path: Path) -> list[Trajectory]:
    """Trajectories from a curation export: one trajectory JSON per non-blank line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TrainingDataError(f"cannot read trajectory export {path}: {error}") from error
    trajectories = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            trajectories.append(Trajectory.from_json(line))
        except TrajectoryFormatError as error:
            raise TrainingDataError(f"{path} line {number}: {error}") from error
    return trajectories


def sft_example(trajectory: Trajectory) -> dict[str, Any]:
    """The TRL row of one trajectory: ``{"messages", "images"}`` with PIL images."""
    if not trajectory.steps:
        raise TrainingDataError(
            f"trajectory {trajectory.id} has no assistant turns; SFT needs at least one"
        )
    return to_trl_example(trajectory, images_as="pil")


def count_tokens(example: dict[str, Any], processor: Any) -> int:
    """Tokens of the rendered row with every image expanded, as the SFT collator sees it."""
    from trl.data_utils import prepare_multimodal_messages

    messages = prepare_multimodal_messages(example["messages"], images=list(example["images"]))
    rendered = processor.apply_chat_template(messages, tokenize=True, return_dict=True)
    return len(rendered["input_ids"][0])


def build_sft_dataset(
    trajectories: Sequence[Trajectory], processor: Any, *, max_length: int | None
) -> SFTData:
    """Rows of the trajectories that fit ``max_length`` tokens (None: all), plus what was dropped."""
    from datasets import Dataset

    if not trajectories:
        raise TrainingDataError("no trajectories to build an SFT dataset from")
    if max_length is not None and max_length <= 0:
        raise TrainingDataError(f"max_length must be positive or None; got {max_length}")
    kept: list[dict[str, Any]] = []
    kept_ids: list[str] = []
    dropped: list[DroppedRow] = []
    for trajectory in trajectories:
        example = sft_example(trajectory)
        if max_length is not None:
            tokens = count_tokens(example, processor)
            if tokens > max_length:
                dropped.append(DroppedRow(trajectory.id, tokens))
                continue
        kept.append(example)
        kept_ids.append(trajectory.id)
    if not kept:
        raise TrainingDataError(
            f"all {len(trajectories)} trajectories exceed max_length={max_length} tokens"
        )
    dataset = Dataset.from_list(kept)
    report = SFTDataReport(len(kept), dropped, max_length, dataset_version(dataset))
    return SFTData(dataset, report, kept_ids)


class _ScriptedDemonstrator:
    """Smoke-test demonstrations: zoom into the task's first diagnostic window, then state the
    label it was given. Only for exercising the pipeline; it knows the answer in advance."""

    def __init__(self, task: Task, label: str) -> None:
        self.task, self.label, self.turn = task, label, 0

    def info(self) -> dict[str, Any]:
        return {"name": "scripted-demonstrator", "label_conditioned": True}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        self.turn += 1
        window = self.task.windows[0]
        if self.turn == 1:
            arguments = {"wavelength_range": list(window.rest_range), "label": window.name}
            call = json.dumps({"name": TOOL_NAME, "arguments": arguments})
            return f"<think>Check {window.name}: {window.look_for}</think><tool_call>{call}</tool_call>"
        verdict = "is" if self.label == "YES" else "is not"
        return (
            f"<think>The {window.name} window decides it.</think>"
            f"<answer>\\boxed{{{self.label}}} The spectrum {verdict} a {self.task.name}.</answer>"
        )


def smoke_trajectories(
    tasks: Sequence[str], *, samples_per_task: int, seed: int = 0
) -> list[Trajectory]:
    """Two-step scripted demonstrations on SpecVI-mini spectra (for CPU smoke runs only)."""
    from agent.synthetic import generate_split

    if samples_per_task <= 0:
        raise TrainingDataError(f"samples_per_task must be positive; got {samples_per_task}")
    trajectories = []
    for code in tasks:
        task = get_task(code)
        n_pos = (samples_per_task + 1) // 2
        split = generate_split(
            task.code, "train", n_pos=n_pos, n_neg=samples_per_task - n_pos, seed=seed
        )
        for sample in split:
            label = "YES" if sample.label else "NO"
            policy = _ScriptedDemonstrator(task, label)
            trajectories.append(inspect(sample.spectrum, task, policy, meta={"smoke": True}))
    return trajectories


# --- GRPO --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledSpectrum:
    """A label-only training item: the spectrum, the task and the expert's YES/NO."""

    spectrum: Spectrum
    task: str
    label: str
    sample_id: str
    # The dataset's own first turn (system prompt, T0, I0), shown instead of specvet's when the
    # run's input distribution is "dataset"; None: specvet's.
    opening: Trajectory | None = None

    def __post_init__(self) -> None:
        if self.label not in PREDICTIONS:
            raise TrainingDataError(
                f"sample {self.sample_id!r}: label must be YES or NO; got {self.label!r}"
            )
        object.__setattr__(self, "task", get_task(self.task).code)


def specvi_mini_items(
    tasks: Sequence[str], *, split: str, n_pos: int, n_neg: int, seed: int
) -> list[LabelledSpectrum]:
    """SpecVI-mini spectra generated in memory, as ``agent.evaluation.specvi_mini_samples``."""
    from agent.synthetic import generate_split

    items = []
    for code in tasks:
        for sample in generate_split(code, split, n_pos=n_pos, n_neg=n_neg, seed=seed):
            items.append(
                LabelledSpectrum(
                    spectrum=sample.spectrum,
                    task=sample.task,
                    label="YES" if sample.label else "NO",
                    sample_id=sample.spectrum.object_id,
                )
            )
    return items


@dataclass
class VerlInputs:
    """How the prompts of imported verl rows compare with the ones GRPO trains on (specvet's)."""

    rows: int = 0
    other_system_prompt: int = 0
    other_user_prompt: int = 0

    def as_sources(self) -> dict[str, Any]:
        return {
            "verl_rows": self.rows,
            "verl_rows_with_other_system_prompt": self.other_system_prompt,
            "verl_rows_with_other_user_prompt": self.other_user_prompt,
        }


def verl_parquet_items(
    paths: Iterable[Path], inputs: VerlInputs | None = None, *, keep_opening: bool = False
) -> list[LabelledSpectrum]:
    """Rows of SpecVI-Bench / verl parquet files; their prompt and image are rebuilt by specvet
    unless ``keep_opening`` (the run's input distribution is "dataset").

    ``inputs``, when given, counts the rows whose own system prompt or T0 differ from specvet's.
    """
    items = []
    ours_system = system_prompt()
    for path in paths:
        for row in read_verl_parquet(Path(path)):
            trajectory, spectrum, ground_truth = from_verl_row(row)
            sample_id = f"{Path(path).name}#{trajectory.meta.get('index')}"
            opening = trajectory if keep_opening else None
            items.append(
                LabelledSpectrum(spectrum, trajectory.task, ground_truth, sample_id, opening)
            )
            if inputs is not None:
                inputs.rows += 1
                inputs.other_system_prompt += (
                    trajectory.system_prompt.strip() != ours_system.strip()
                )
                ours_user = build_prompt(get_task(trajectory.task))
                inputs.other_user_prompt += trajectory.user_prompt.strip() != ours_user.strip()
    return items


def prompt_trajectory(spectrum: Spectrum, task: Task, *, use_tool: bool = True) -> Trajectory:
    """The step-less trajectory ``agent.rollout.inspect`` starts from: prompts and I0."""
    initial = SpectralVisualizationTool(spectrum).render_full()
    if not initial.ok or initial.png is None:
        raise TrainingDataError(
            f"cannot render I0 of {spectrum.object_id or spectrum.source}: {initial.text}"
        )
    return Trajectory.new(
        task=task.code,
        spectrum=SpectrumRef.from_spectrum(spectrum),
        system_prompt=system_prompt(),
        user_prompt=build_prompt(task) + ("" if use_tool else NO_TOOL_PROMPT_NOTE),
        initial_image=ImageRef(initial.png, initial.wavelength_range, None),
    )


def dataset_opening(opening: Trajectory, *, use_tool: bool = True) -> Trajectory:
    """The step-less trajectory of an imported row as shipped: its system prompt, T0 and I0."""
    return Trajectory.new(
        task=opening.task,
        spectrum=opening.spectrum,
        system_prompt=opening.system_prompt,
        user_prompt=opening.user_prompt + ("" if use_tool else NO_TOOL_PROMPT_NOTE),
        initial_image=opening.initial_image,
    )


def rl_row(item: LabelledSpectrum, *, use_tool: bool = True) -> dict[str, Any]:
    """One GRPO row: prompt messages, [I0], label, task and the spectrum as plain lists."""
    trajectory = prompt_trajectory(item.spectrum, get_task(item.task), use_tool=use_tool)
    if item.opening is not None:
        trajectory = dataset_opening(item.opening, use_tool=use_tool)
    example = to_trl_example(trajectory, images_as="pil")
    spectrum = item.spectrum
    assert spectrum.mask is not None
    return {
        "prompt": example["messages"],
        "images": example["images"],
        "ground_truth": item.label,
        "task": item.task,
        "sample_id": item.sample_id,
        "spectrum_wavelength": spectrum.wavelength.tolist(),
        "spectrum_flux": spectrum.flux.tolist(),
        "spectrum_ivar": None if spectrum.ivar is None else spectrum.ivar.tolist(),
        "spectrum_mask": spectrum.mask.tolist(),
        "spectrum_redshift": float(spectrum.redshift),
        "spectrum_object_id": spectrum.object_id,
        "spectrum_survey": spectrum.survey,
        "spectrum_source": spectrum.source,
    }


def build_rl_dataset(items: Sequence[LabelledSpectrum], *, use_tool: bool = True) -> Any:
    """A ``datasets.Dataset`` of GRPO rows (columns ``RL_COLUMNS``); ``use_tool=False`` gives the
    no-tool ablation's prompt (the one ``agent.rollout.inspect(use_tool=False)`` sends)."""
    from datasets import Dataset

    if not items:
        raise TrainingDataError("no labelled spectra to build a GRPO dataset from")
    return Dataset.from_list([rl_row(item, use_tool=use_tool) for item in items])


def spectrum_from_row(row: dict[str, Any]) -> Spectrum:
    """Rebuild the spectrum of a GRPO row (the inverse of ``rl_row``'s spectrum columns)."""
    missing = [name for name in SPECTRUM_COLUMNS if name not in row]
    if missing:
        raise TrainingDataError(f"GRPO row {row.get('sample_id')!r} lacks columns {missing}")
    return Spectrum(
        wavelength=row["spectrum_wavelength"],
        flux=row["spectrum_flux"],
        ivar=row["spectrum_ivar"],
        mask=row["spectrum_mask"],
        redshift=float(row["spectrum_redshift"]),
        survey=row["spectrum_survey"],
        object_id=row["spectrum_object_id"],
        source=row["spectrum_source"],
    )


# --- versions ----------------------------------------------------------------------------------


def dataset_version(dataset: Any) -> str:
    """A content hash of a dataset: same columns and same rows (images by their bytes) give the
    same version, whatever order the columns were built in."""
    digest = hashlib.sha256()
    digest.update(json.dumps(sorted(dataset.column_names)).encode())
    for row in dataset.with_format("arrow")[:].to_pylist():
        line = json.dumps(row, sort_keys=True, default=_bytes_digest, allow_nan=True)
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()[:VERSION_CHARS]


def _bytes_digest(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return "sha256:" + hashlib.sha256(bytes(value)).hexdigest()
    raise TypeError(f"cannot hash a {type(value).__name__} in a dataset row")
