"""What the three layouts share: task codes, the conversation every format reduces to, PNGs."""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Sequence
from typing import Any

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
