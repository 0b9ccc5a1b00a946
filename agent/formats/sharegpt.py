"""LLaMA-Factory ShareGPT rows of the Spec-o3 cold-start set, and their files."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agent import bounded_json
from agent.formats.common import (
    _SHAREGPT_ROLES,
    SHAREGPT_IMAGE_DIR,
    DatasetFormatError,
    _build_trajectory,
    _png,
    infer_task,
    specvi_code,
    task_code,
)
from agent.formats.verl import _ground_truth
from agent.trajectory import (
    IMAGE_PLACEHOLDER,
    SpectrumRef,
    Trajectory,
    conversation_turns,
)

# --- LLaMA-Factory ShareGPT --------------------------------------------------------------------


def to_sharegpt_row(
    trajectory: Trajectory,
    *,
    image_dir: Path,
    image_prefix: str,
    sample_index: int | None = None,
    ground_truth: str | None = None,
) -> dict[str, Any]:
    """One ShareGPT row; the PNGs are written to ``image_dir``.

    ``image_prefix`` is ``image_dir`` as the row should name it, relative to the dataset file
    (e.g. ``"images"``). Files are named ``<trajectory id>-NN.png``, or keep the names of an
    imported row; an existing file with different bytes is never overwritten.
    ``sample_index`` and ``ground_truth`` default to the trajectory's meta (then 0 and null).
    """
    turns = conversation_turns(trajectory)
    for position, (role, text) in enumerate(turns):
        expected = "user" if position % 2 == 0 else "assistant"
        if role != expected:
            raise DatasetFormatError(
                f"trajectory {trajectory.id}: ShareGPT needs human/gpt turns to alternate; "
                f"turn {position} is {role} (a step without a tool response before another step)"
            )
        if role == "assistant" and IMAGE_PLACEHOLDER in text:
            raise DatasetFormatError(
                f"trajectory {trajectory.id}: assistant turn {position} holds a literal "
                f"{IMAGE_PLACEHOLDER}, which LLaMA-Factory would read as an image placeholder"
            )
    if turns[-1][0] != "assistant":
        raise DatasetFormatError(
            f"trajectory {trajectory.id}: ShareGPT rows end with a gpt turn; this one ends "
            "with a tool response or has no steps"
        )
    images = trajectory.images()
    image_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, png in zip(_image_names(trajectory, len(images)), images, strict=True):
        target = image_dir / name
        if target.exists() and target.read_bytes() != png:
            raise DatasetFormatError(
                f"trajectory {trajectory.id}: {target} already holds a different image"
            )
        target.write_bytes(png)
        paths.append(posixpath.join(image_prefix, name) if image_prefix else name)
    conversations = []
    if trajectory.system_prompt:
        conversations.append({"from": "system", "value": trajectory.system_prompt})
    conversations += [
        {"from": "human" if role == "user" else "gpt", "value": text} for role, text in turns
    ]
    if ground_truth is None:
        ground_truth = trajectory.meta.get("ground_truth")
    if ground_truth is not None:
        ground_truth = _ground_truth(ground_truth, f"trajectory {trajectory.id}")
    if sample_index is None:
        sample_index = int(trajectory.meta.get("sample_index", 0))
    return {
        "conversations": conversations,
        "images": paths,
        "source_name": trajectory.meta.get("source_name")
        or f"specvet_{specvi_code(trajectory.task)}",
        "sample_index": sample_index,
        "ground_truth": ground_truth,
    }


def _image_names(trajectory: Trajectory, count: int) -> list[str]:
    """File names of an imported row's images again, else ``<trajectory id>-NN.png``."""
    imported = trajectory.meta.get("sharegpt_images")
    if (
        isinstance(imported, list)
        and len(imported) == count
        and all(isinstance(path, str) for path in imported)
    ):
        names = [posixpath.basename(path) for path in imported]
        if len(set(names)) == count and all(names):
            return names
    return [f"{trajectory.id}-{position:02d}.png" for position in range(count)]


def from_sharegpt_row(
    row: dict[str, Any],
    *,
    base_dir: Path,
    task: str | None = None,
    spectrum_ref: SpectrumRef | None = None,
) -> Trajectory:
    """A trajectory from one ShareGPT row; image paths are relative to ``base_dir``.

    The task comes from a task code in ``source_name`` (cv, cc, ss, gm, wd, cs, mg) or from
    ``task=``; when both are present they must agree. Each gpt turn is parsed for its tool call
    and answer, and each tool response is attached to the step before it.
    """
    if not isinstance(row, dict):
        raise DatasetFormatError(f"a ShareGPT row must be an object; got {type(row).__name__}")
    source_name = str(row.get("source_name") or "")
    sample_index = row.get("sample_index")
    where = f"ShareGPT row {sample_index!r} ({source_name or 'no source_name'})"
    inferred = infer_task(source_name) if source_name else None
    explicit = task_code(task) if task is not None else None
    if inferred and explicit and inferred != explicit:
        raise DatasetFormatError(f"{where}: source_name names task {inferred} but task={task!r}")
    resolved = explicit or inferred
    if resolved is None:
        raise DatasetFormatError(f"{where}: no task code in source_name; pass task=")
    conversations = row.get("conversations")
    if not isinstance(conversations, list) or not conversations:
        raise DatasetFormatError(f"{where}: 'conversations' must be a non-empty list")
    system = row.get("system") or ""
    turns: list[tuple[str, str]] = []
    for position, turn in enumerate(conversations):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise DatasetFormatError(f"{where} turn {position}: needs 'from' and a str 'value'")
        speaker = turn.get("from")
        if speaker == "system" and position == 0:
            system = turn["value"]
        elif speaker in _SHAREGPT_ROLES:
            turns.append((_SHAREGPT_ROLES[speaker], turn["value"]))
        else:
            raise DatasetFormatError(f"{where} turn {position}: unknown 'from' {speaker!r}")
    image_paths = row.get("images") or []
    images = [_read_image(base_dir, path, where) for path in image_paths]
    reference = spectrum_ref or SpectrumRef(
        object_id=f"{source_name}#{sample_index}",
        survey="unknown",
        source=f"sharegpt:{source_name}#{sample_index}",
        redshift=None,
    )
    meta = {
        "imported_from": "sharegpt",
        "source_name": source_name,
        "sample_index": sample_index,
        "ground_truth": row.get("ground_truth"),
        "sharegpt_images": list(image_paths),
    }
    return _build_trajectory(
        system=system,
        turns=turns,
        images=images,
        task=resolved,
        spectrum=reference,
        meta=meta,
        where=where,
    )


def _read_image(base_dir: Path, relative: Any, where: str) -> bytes:
    if not isinstance(relative, str) or not relative:
        raise DatasetFormatError(
            f"{where}: image paths must be non-empty strings; got {relative!r}"
        )
    path = base_dir / relative
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetFormatError(f"{where}: cannot read image {path}: {error}") from error
    return _png(data, f"{where} image {relative}")


def write_sharegpt_file(trajectories: Iterable[Trajectory], path: Path) -> None:
    """A JSON list of ShareGPT rows at ``path``; images go to ``images/`` next to it."""
    path = Path(path)
    image_dir = path.parent / SHAREGPT_IMAGE_DIR
    rows = []
    for position, trajectory in enumerate(trajectories):
        index = trajectory.meta.get("sample_index")
        rows.append(
            to_sharegpt_row(
                trajectory,
                image_dir=image_dir,
                image_prefix=SHAREGPT_IMAGE_DIR,
                sample_index=index if isinstance(index, int) else position,
            )
        )
    path.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def load_sharegpt_file(path: Path, *, task: str | None = None) -> list[Trajectory]:
    """Every row of a ShareGPT JSON list; image paths are relative to the file's folder."""
    path = Path(path)
    try:
        rows = bounded_json.loads(
            path.read_text(encoding="utf-8"), what=f"ShareGPT file {path.name}"
        )
    except (OSError, ValueError) as error:
        raise DatasetFormatError(f"cannot read ShareGPT file {path}: {error}") from error
    if not isinstance(rows, list):
        raise DatasetFormatError(f"ShareGPT file {path} must hold a JSON list of rows")
    return [from_sharegpt_row(row, base_dir=path.parent, task=task) for row in rows]


def cold_start_warnings(trajectories: Sequence[Trajectory]) -> list[str]:
    """What in imported demonstrations differs from what specvet trains and infers with: the
    system prompt, and I0's size (specvet renders every plot at one size). A model fine-tuned
    on them sees something else at inference; these are warnings to show, not refusals."""
    from agent.inspection_tasks import system_prompt
    from agent.render import RENDERER_NAME, RENDERER_VERSION
    from agent.tool import IMAGE_SIZE

    ours = system_prompt()
    other_prompt = [t for t in trajectories if t.system_prompt != ours]
    other_size = [t for t in trajectories if _png_size(t.initial_image.png) != IMAGE_SIZE]
    warnings = []
    if other_prompt:
        warnings.append(
            f"{len(other_prompt)} of {len(trajectories)} rows have a system prompt that differs "
            f"from the one specvet trains and infers with (e.g. {_row_names(other_prompt)}): "
            f"first difference {_first_difference(other_prompt[0].system_prompt, ours)}"
        )
    if other_size:
        width, height = IMAGE_SIZE
        sizes = sorted({"x".join(map(str, _png_size(t.initial_image.png))) for t in other_size})
        warnings.append(
            f"{len(other_size)} of {len(trajectories)} rows show I0 at "
            f"{', '.join(sizes[:3])} pixels (e.g. {_row_names(other_size)}); specvet renders "
            f"{width}x{height} ({RENDERER_NAME} {RENDERER_VERSION})"
        )
    return warnings


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _row_names(trajectories: Sequence[Trajectory]) -> str:
    names = [
        f"{t.meta['source_name']}#{t.meta['sample_index']}"
        if "sample_index" in t.meta
        else t.spectrum.object_id
        for t in trajectories[:3]
    ]
    return ", ".join(names) + (", …" if len(trajectories) > 3 else "")


def _first_difference(theirs: str, ours: str) -> str:
    position = next(
        (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
        min(len(theirs), len(ours)),
    )
    return (
        f"at character {position}: theirs {theirs[position : position + 40]!r}, "
        f"ours {ours[position : position + 40]!r}"
    )
