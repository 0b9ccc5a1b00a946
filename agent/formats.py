"""Converters between ``Trajectory`` and the public layouts, both ways.

- TRL conversational examples (ml_path.md section 1): ``{"messages", "images"}`` with
  ``{"type": "image"}`` placeholders filled from ``images`` in order; tool results are user turns.
- LLaMA-Factory ShareGPT rows of the Spec-o3 cold-start set: ``conversations`` of
  system/human/gpt turns whose text holds ``<image>`` placeholders, tool results as human turns
  wrapped in ``<tool_response>...</tool_response>``, ``images`` as relative paths,
  ``source_name``, ``sample_index``, ``ground_truth``.
- SpecVI-Bench / verl parquet rows (common.md): a prompt, I0 and the spectrum arrays in
  ``extra_info.tools_kwargs``; our extra provenance lives in ``extra_info["specvet"]``, which
  verl ignores, so ivar, mask and survey metadata survive a round trip.

All three reduce to the same conversation: a system text, then (role, text) turns where
``<image>`` marks each image, and the images in order (``trajectory.conversation_turns``).
Written rows use the canonical tool-response text ``<tool_response>\\n<image>TEXT\\n</tool_response>``;
read rows may vary in the whitespace around the wrapper and the image.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.parsing import PREDICTIONS
from agent.spectra import Spectrum, SpectrumFormatError
from agent.trajectory import (
    IMAGE_PLACEHOLDER,
    PNG_SIGNATURE,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    ImageRef,
    SpectrumRef,
    Step,
    ToolResponse,
    Trajectory,
    conversation_turns,
    to_messages,
)

SPECVI_TO_TASK = {
    "cv": "CV",
    "cc": "CS",
    "ss": "SS",
    "gm": "MG",
    "wd": "WD",
    "o": "O",
    "b": "B",
    "a": "A",
}
TASK_TO_SPECVI = {task: code for code, task in SPECVI_TO_TASK.items()}
VERL_ABILITY = "spectral_inspection"
VERL_TOOL_NAME = "spectral_visualization_tool"
SHAREGPT_IMAGE_DIR = "images"
_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "observation": "user"}
_TASK_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[a-z0-9]+")
_TRAJECTORY_NAMESPACE = uuid.UUID("6f1d3c52-7c1e-4a55-9a51-5b0f3e0c2d71")


class DatasetFormatError(ValueError):
    """A row or file of a public layout that cannot be converted; the message says where and why."""


# --- task codes --------------------------------------------------------------------------------


def task_code(code: str) -> str:
    """Our task code ("CV", "CS", ...) for one of ours or a SpecVI-Bench code (cc -> CS)."""
    if not isinstance(code, str) or not _TASK_CODE.fullmatch(code.strip()):
        raise DatasetFormatError(
            f"task code must be letters and digits like 'CV' or 'cc'; got {code!r}"
        )
    key = code.strip()
    if key.lower() in SPECVI_TO_TASK and key.upper() not in TASK_TO_SPECVI:
        return SPECVI_TO_TASK[key.lower()]
    return key.upper()


def specvi_code(task: str) -> str:
    """The SpecVI-Bench file/extra_info code of a task ("CS" -> "cc"); other tasks lowercased."""
    code = task_code(task)
    return TASK_TO_SPECVI.get(code, code.lower())


def infer_task(source_name: str) -> str | None:
    """The task named by a two-letter code token in a source name ("train_cv" -> "CV")."""
    known = {code for code in SPECVI_TO_TASK if len(code) == 2}
    known |= {task.lower() for task in TASK_TO_SPECVI if len(task) == 2}
    found = {task_code(token) for token in _TOKEN.findall(source_name.lower()) if token in known}
    if len(found) > 1:
        raise DatasetFormatError(
            f"source_name {source_name!r} names several tasks {sorted(found)}; pass task="
        )
    return found.pop() if found else None


# --- the shared conversation -------------------------------------------------------------------


def parse_tool_response(text: str, where: str) -> tuple[bool, str]:
    """(has an image, observation text) from a tool-response user turn."""
    if text.startswith(TOOL_RESPONSE_OPEN) and text.endswith(TOOL_RESPONSE_CLOSE):
        inner = text[len(TOOL_RESPONSE_OPEN) : len(text) - len(TOOL_RESPONSE_CLOSE)]
    else:
        stripped = text.strip()
        if not (stripped.startswith("<tool_response>") and stripped.endswith("</tool_response>")):
            raise DatasetFormatError(
                f"{where}: a user turn after the prompt must be a tool response wrapped in "
                f"<tool_response>...</tool_response>; got {stripped[:60]!r}"
            )
        inner = stripped[len("<tool_response>") : -len("</tool_response>")]
        inner = inner.removeprefix("\n").removesuffix("\n")
    count = inner.count(IMAGE_PLACEHOLDER)
    if count > 1:
        raise DatasetFormatError(f"{where}: a tool response holds {count} images; at most 1")
    if count == 0:
        return False, inner
    before, after = inner.split(IMAGE_PLACEHOLDER)
    return True, before + after


def _build_trajectory(
    *,
    system: str,
    turns: Sequence[tuple[str, str]],
    images: Sequence[bytes],
    task: str,
    spectrum: SpectrumRef,
    meta: dict[str, Any],
    where: str,
    trajectory_id: str | None = None,
) -> Trajectory:
    if not turns or turns[0][0] != "user":
        raise DatasetFormatError(f"{where}: the conversation must start with the user prompt")
    if IMAGE_PLACEHOLDER in system:
        raise DatasetFormatError(f"{where}: the system prompt holds an {IMAGE_PLACEHOLDER}")
    placeholders = sum(text.count(IMAGE_PLACEHOLDER) for role, text in turns if role == "user")
    if placeholders != len(images):
        raise DatasetFormatError(
            f"{where}: {placeholders} {IMAGE_PLACEHOLDER} placeholders but {len(images)} images"
        )
    prompt = turns[0][1]
    if prompt.count(IMAGE_PLACEHOLDER) != 1:
        raise DatasetFormatError(
            f"{where}: the user prompt must hold exactly one {IMAGE_PLACEHOLDER} (I0); "
            f"found {prompt.count(IMAGE_PLACEHOLDER)}"
        )
    image_iter = iter(images)
    initial = ImageRef(_png(next(image_iter), f"{where} image 0"))
    steps: list[Step] = []
    for number, (role, text) in enumerate(turns[1:], start=1):
        turn_where = f"{where} turn {number}"
        if role == "assistant":
            steps.append(Step.from_output(len(steps), text))
        elif role == "user":
            if not steps or steps[-1].tool_result is not None:
                raise DatasetFormatError(
                    f"{turn_where}: a user turn must follow an assistant turn (two in a row)"
                )
            has_image, body = parse_tool_response(text, turn_where)
            image = ImageRef(_png(next(image_iter), turn_where)) if has_image else None
            steps[-1].tool_result = ToolResponse(ok=has_image, text=body, image=image)
        else:
            raise DatasetFormatError(f"{turn_where}: unknown role {role!r}")
    trajectory = Trajectory(
        id=trajectory_id or str(uuid.uuid4()),
        task=task,
        spectrum=spectrum,
        system_prompt=system,
        user_prompt=prompt,
        initial_image=initial,
        steps=steps,
        meta=meta,
    )
    if steps:
        answered = trajectory.steps[-1].parsed().answer is not None
        trajectory.finalize("answer" if answered else None)
    return trajectory


def _png(data: Any, where: str) -> bytes:
    """PNG bytes from bytes, a ``{"bytes": ...}`` dict or a PIL image (re-encoded as PNG)."""
    if isinstance(data, dict):
        data = data.get("bytes")
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if isinstance(data, bytes):
        if data.startswith(PNG_SIGNATURE):
            return data
        return _reencode(data, where)
    if hasattr(data, "save") and hasattr(data, "mode"):  # a PIL image
        buffer = io.BytesIO()
        data.save(buffer, format="PNG")
        return buffer.getvalue()
    raise DatasetFormatError(
        f"{where}: an image must be PNG bytes or a PIL image; got {type(data).__name__}"
    )


def _reencode(data: bytes, where: str) -> bytes:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
    except (UnidentifiedImageError, OSError) as error:
        raise DatasetFormatError(
            f"{where}: image bytes are not a readable image: {error}"
        ) from error
    return buffer.getvalue()


# --- TRL ---------------------------------------------------------------------------------------


def to_trl_example(trajectory: Trajectory, *, images_as: str = "png") -> dict[str, Any]:
    """A TRL conversational VLM example: ``{"messages": [...], "images": [...]}``.

    ``images_as="png"`` gives PNG bytes (lossless); ``"pil"`` gives PIL images for trainers that
    want them decoded.
    """
    if images_as not in ("png", "pil"):
        raise ValueError(f"images_as must be 'png' or 'pil'; got {images_as!r}")
    messages = []
    for message in to_messages(trajectory):
        content = [
            {"type": "image"} if part["type"] == "image" else {"type": "text", "text": part["text"]}
            for part in message["content"]
        ]
        messages.append({"role": message["role"], "content": content})
    images: list[Any] = trajectory.images()
    if images_as == "pil":
        from PIL import Image

        images = [Image.open(io.BytesIO(png)) for png in images]
        for image in images:
            image.load()
    return {"messages": messages, "images": images}


def from_trl_example(
    example: dict[str, Any],
    *,
    task: str,
    spectrum_ref: SpectrumRef,
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """A trajectory from a TRL example; ``tool`` role messages are read as tool responses."""
    where = "TRL example"
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DatasetFormatError(f"{where}: 'messages' must be a non-empty list")
    pending = list(example.get("images") or [])
    images: list[bytes] = []
    system = ""
    turns: list[tuple[str, str]] = []
    for position, message in enumerate(messages):
        message_where = f"{where} message {position}"
        if not isinstance(message, dict):
            raise DatasetFormatError(f"{message_where} must be a dict")
        role = message.get("role")
        text, has_images = _trl_content_text(
            message.get("content"), pending, images, message_where, role == "assistant"
        )
        if role == "system":
            if position != 0 or has_images:
                raise DatasetFormatError(f"{message_where}: system must come first, text only")
            system = text
        elif role in ("user", "assistant"):
            turns.append((role, text))
        elif role == "tool":
            turns.append(("user", _tool_message_text(text, message_where)))
        else:
            raise DatasetFormatError(f"{message_where}: unknown role {role!r}")
    if pending:
        raise DatasetFormatError(f"{where}: {len(pending)} images left over after the placeholders")
    return _build_trajectory(
        system=system,
        turns=turns,
        images=images,
        task=task,
        spectrum=spectrum_ref,
        meta=dict(meta or {}),
        where=where,
    )


def _tool_message_text(text: str, where: str) -> str:
    """A ``tool`` message as the user-turn text; the wrapper is added when it is missing."""
    if text.lstrip().startswith("<tool_response>"):
        return text
    count = text.count(IMAGE_PLACEHOLDER)
    if count > 1:
        raise DatasetFormatError(f"{where}: a tool message holds {count} images; at most 1")
    image = IMAGE_PLACEHOLDER if count else ""
    body = text.replace(IMAGE_PLACEHOLDER, "")
    return f"{TOOL_RESPONSE_OPEN}{image}{body}{TOOL_RESPONSE_CLOSE}"


def _trl_content_text(
    content: Any, pending: list[Any], images: list[bytes], where: str, model_output: bool
) -> tuple[str, bool]:
    """Message text with ``<image>`` for each image part; images are collected in order.

    Model output is text only, and an ``<image>`` the model wrote stays literal text.
    """
    if isinstance(content, str):
        return content, False
    if not isinstance(content, list):
        raise DatasetFormatError(f"{where}: content must be a string or a list of parts")
    pieces: list[str] = []
    has_images = False
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str) or (IMAGE_PLACEHOLDER in text and not model_output):
                raise DatasetFormatError(
                    f"{where}: a text part must be a str without a literal {IMAGE_PLACEHOLDER}"
                )
            pieces.append(text)
        elif kind == "image" and model_output:
            raise DatasetFormatError(f"{where}: an assistant turn cannot hold an image")
        elif kind == "image":
            inline = part.get("image", part.get("png"))
            if inline is None:
                if not pending:
                    raise DatasetFormatError(f"{where}: more image placeholders than images")
                inline = pending.pop(0)
            images.append(_png(inline, where))
            pieces.append(IMAGE_PLACEHOLDER)
            has_images = True
        else:
            raise DatasetFormatError(f"{where}: part type {kind!r}; expected 'text' or 'image'")
    return "".join(pieces), has_images


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
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
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


# --- SpecVI-Bench / verl parquet ---------------------------------------------------------------


def to_verl_row(
    trajectory: Trajectory,
    *,
    spectrum: Spectrum,
    ground_truth: str,
    index: int,
    split: str,
    data_source: str,
    drop_steps: bool = False,
) -> dict[str, Any]:
    """A verl/SpecVI-Bench row for the trajectory's prompt and I0.

    The layout holds prompts only: a trajectory with steps needs ``drop_steps=True``.
    """
    where = f"trajectory {trajectory.id}"
    if trajectory.steps and not drop_steps:
        raise DatasetFormatError(
            f"{where} has {len(trajectory.steps)} steps; verl rows hold the prompt only "
            "(pass drop_steps=True to export just the prompt)"
        )
    if spectrum.object_id != trajectory.spectrum.object_id:
        raise DatasetFormatError(
            f"{where} is about {trajectory.spectrum.object_id!r} but the spectrum given is "
            f"{spectrum.object_id!r}"
        )
    prompt = []
    if trajectory.system_prompt:
        prompt.append({"role": "system", "content": trajectory.system_prompt})
    prompt.append({"role": "user", "content": trajectory.user_prompt})
    assert spectrum.mask is not None
    return {
        "data_source": data_source,
        "prompt": prompt,
        "images": [{"bytes": trajectory.initial_image.png}],
        "ability": VERL_ABILITY,
        "reward_model": {"style": "rule", "ground_truth": _ground_truth(ground_truth, where)},
        "extra_info": {
            "index": int(index),
            "name": spectrum.object_id,
            "split": split,
            "task": specvi_code(trajectory.task),
            "tools_kwargs": {
                VERL_TOOL_NAME: {
                    "create_kwargs": {
                        "wavelength": spectrum.wavelength.tolist(),
                        "flux": spectrum.flux.tolist(),
                        "redshift": _verl_redshift(trajectory.spectrum, spectrum),
                    }
                }
            },
            "specvet": {
                "task": trajectory.task,
                "survey": spectrum.survey,
                "source": spectrum.source,
                "ra": spectrum.ra,
                "dec": spectrum.dec,
                "snr": spectrum.snr,
                "meta_json": json.dumps(spectrum.meta, sort_keys=True, ensure_ascii=False),
                "ivar": None if spectrum.ivar is None else spectrum.ivar.tolist(),
                "mask": spectrum.mask.tolist(),
                "initial_image_range": None
                if trajectory.initial_image.wavelength_range is None
                else list(trajectory.initial_image.wavelength_range),
                "initial_image_label": trajectory.initial_image.label,
            },
        },
    }


def from_verl_row(
    row: dict[str, Any], *, task: str | None = None
) -> tuple[Trajectory, Spectrum, str]:
    """(prompt-only trajectory, spectrum, ground truth "YES"/"NO") from one verl row.

    The trajectory id is derived from data_source, split, index and task, so importing the
    same row twice gives the same id. A null redshift reads as 0 for the spectrum and stays
    None in the trajectory's spectrum reference.
    """
    extra = _mapping(row.get("extra_info"), "verl row extra_info")
    index = extra.get("index")
    data_source = str(row.get("data_source") or "")
    split = str(extra.get("split") or "")
    where = f"verl row {data_source}/{split}#{index}"
    ours = extra.get("specvet") or {}
    resolved = _verl_task(ours.get("task") or extra.get("task"), task, where)
    system, user_prompt = _verl_prompt(row.get("prompt"), where)
    images = row.get("images")
    if not isinstance(images, list) or len(images) != 1:
        count = len(images) if isinstance(images, list) else type(images).__name__
        raise DatasetFormatError(f"{where}: 'images' must hold exactly I0; got {count}")
    reward = _mapping(row.get("reward_model"), f"{where} reward_model")
    ground_truth = _ground_truth(reward.get("ground_truth"), where)
    spectrum = _verl_spectrum(extra, ours, data_source, split, index, where)
    create_kwargs = extra["tools_kwargs"][VERL_TOOL_NAME]["create_kwargs"]
    raw_redshift = create_kwargs.get("redshift")
    reference = SpectrumRef(
        object_id=spectrum.object_id,
        survey=spectrum.survey,
        source=spectrum.source,
        redshift=None if raw_redshift is None else float(raw_redshift),
    )
    initial_range = ours.get("initial_image_range")
    trajectory = Trajectory(
        id=str(uuid.uuid5(_TRAJECTORY_NAMESPACE, f"verl:{data_source}:{split}:{index}:{resolved}")),
        task=resolved,
        spectrum=reference,
        system_prompt=system,
        user_prompt=user_prompt,
        initial_image=ImageRef(
            _png(images[0], f"{where} image 0"),
            None if initial_range is None else tuple(initial_range),
            ours.get("initial_image_label"),
        ),
        meta={"imported_from": "verl", "data_source": data_source, "split": split, "index": index},
    )
    return trajectory, spectrum, ground_truth


def _verl_redshift(reference: SpectrumRef, spectrum: Spectrum) -> float | None:
    """None (the bench's "unknown") when the reference has none and the spectrum says 0."""
    if reference.redshift is None and spectrum.redshift == 0.0:
        return None
    return float(spectrum.redshift)


def _verl_task(recorded: Any, explicit: str | None, where: str) -> str:
    found = task_code(recorded) if recorded else None
    given = task_code(explicit) if explicit is not None else None
    if found and given and found != given:
        raise DatasetFormatError(f"{where}: the row is task {found} but task={explicit!r}")
    resolved = found or given
    if resolved is None:
        raise DatasetFormatError(f"{where}: extra_info has no task; pass task=")
    return resolved


def _verl_prompt(prompt: Any, where: str) -> tuple[str, str]:
    if not isinstance(prompt, list) or not prompt:
        raise DatasetFormatError(f"{where}: 'prompt' must be a non-empty list of messages")
    system, user = "", None
    for position, message in enumerate(prompt):
        message = _mapping(message, f"{where} prompt[{position}]")
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                IMAGE_PLACEHOLDER
                if _mapping(part, f"{where} prompt[{position}] part").get("type") == "image"
                else str(part.get("text", ""))
                for part in content
            )
        if not isinstance(content, str):
            raise DatasetFormatError(f"{where} prompt[{position}]: content must be text")
        role = message.get("role")
        if role == "system" and position == 0:
            system = content
        elif role == "user" and user is None:
            user = content
        else:
            raise DatasetFormatError(
                f"{where} prompt[{position}]: expected an optional system message then one "
                f"user message; got role {role!r}"
            )
    if user is None:
        raise DatasetFormatError(f"{where}: the prompt has no user message")
    if user.count(IMAGE_PLACEHOLDER) != 1:
        raise DatasetFormatError(
            f"{where}: the user prompt must hold exactly one {IMAGE_PLACEHOLDER}; "
            f"found {user.count(IMAGE_PLACEHOLDER)}"
        )
    return system, user


def _verl_spectrum(
    extra: dict[str, Any],
    ours: dict[str, Any],
    data_source: str,
    split: str,
    index: Any,
    where: str,
) -> Spectrum:
    try:
        create_kwargs = extra["tools_kwargs"][VERL_TOOL_NAME]["create_kwargs"]
    except (KeyError, TypeError) as error:
        raise DatasetFormatError(
            f"{where}: extra_info.tools_kwargs.{VERL_TOOL_NAME}.create_kwargs is missing"
        ) from error
    wavelength = _float_array(create_kwargs.get("wavelength"), f"{where} wavelength")
    flux = _float_array(create_kwargs.get("flux"), f"{where} flux")
    if wavelength.size < 2 or wavelength.shape != flux.shape:
        raise SpectrumFormatError(
            f"{where}: wavelength and flux must be equal-length lists of at least 2 values; "
            f"got {wavelength.size} and {flux.size}"
        )
    if not np.all(np.diff(wavelength) > 0):
        raise SpectrumFormatError(f"{where}: wavelength must be strictly increasing")
    ivar = ours.get("ivar")
    mask = ours.get("mask")
    redshift = create_kwargs.get("redshift")
    return Spectrum(
        wavelength=wavelength,
        flux=flux,
        ivar=None if ivar is None else _float_array(ivar, f"{where} ivar"),
        mask=None if mask is None else np.asarray(mask, dtype=bool),
        redshift=0.0 if redshift is None else float(redshift),
        survey=ours.get("survey") or "SpecVI-Bench",
        object_id=str(extra.get("name") or f"{data_source}#{index}"),
        ra=ours.get("ra"),
        dec=ours.get("dec"),
        snr=ours.get("snr"),
        meta=json.loads(ours["meta_json"]) if ours.get("meta_json") else {},
        source=ours.get("source") or f"{data_source}/{split}#{index}",
    )


def _float_array(values: Any, where: str) -> np.ndarray:
    if values is None:
        raise DatasetFormatError(f"{where} is missing")
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise SpectrumFormatError(f"{where} must be a list of numbers: {error}") from error


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DatasetFormatError(f"{where} must be an object; got {type(value).__name__}")
    return value


def _ground_truth(value: Any, where: str) -> str:
    label = value.strip().upper() if isinstance(value, str) else None
    if label not in PREDICTIONS:
        raise DatasetFormatError(f"{where}: ground truth must be YES or NO; got {value!r}")
    return label


def read_verl_parquet(path: Path) -> list[dict[str, Any]]:
    """The rows of a SpecVI-Bench/verl parquet file as plain dicts (images as bytes)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as error:
        raise DatasetFormatError(f"cannot read parquet file {path}: {error}") from error
    return table.to_pylist()


def write_verl_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write rows with pyarrow; the same rows always give the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DatasetFormatError(f"no rows to write to {path}")
    try:
        table = pa.Table.from_pylist(list(rows))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DatasetFormatError(f"rows for {path} do not share one schema: {error}") from error
    pq.write_table(table, path, compression="zstd")
