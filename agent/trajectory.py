"""The canonical inspection trajectory: what the rollout loop records and every format converts.

A trajectory holds a reference to its spectrum (never the arrays), the prompts, the initial
image I0, one ``Step`` per assistant turn and the outcome. ``to_json``/``from_json`` are
lossless (PNG bytes as base64, keys sorted), so JSON -> object -> JSON is byte-identical.

Prompt text convention: ``user_prompt`` holds exactly one ``<image>`` placeholder marking where
I0 is shown (``tasks.build_prompt`` starts with ``"<image>\\n"``). Messages for a policy split
the text there; public formats keep the placeholder as it is. A step whose ``tool_result`` is
set is followed by a user turn ``<tool_response>\\n[image]text\\n</tool_response>``; that
includes the error feedback the loop sends back for a call it could not run.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agent import bounded_json, parsing
from agent.parsing import ToolCall

SCHEMA_VERSION = 1
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE_PLACEHOLDER = "<image>"
TOOL_RESPONSE_OPEN = "<tool_response>\n"
TOOL_RESPONSE_CLOSE = "\n</tool_response>"
STOP_REASONS = (
    "answer",  # the policy answered
    "tool_limit",  # the tool-call budget was spent without an answer
    "max_turns",  # the turn budget was spent (turns without a call count too)
    "policy_error",  # the policy raised (endpoint down, model missing)
    "context_limit",  # the conversation no longer fits the model
    "cancelled",  # stopped by a person or a shutdown
)


class TrajectoryFormatError(ValueError):
    """A trajectory value or serialized form that breaks the schema; the message says where."""


@dataclass(frozen=True)
class SpectrumRef:
    object_id: str
    survey: str
    source: str  # where the spectrum was read from: "path" or "path#row"
    redshift: float | None = None

    @classmethod
    def from_spectrum(cls, spectrum: Any) -> SpectrumRef:
        """The reference to an ``agent.spectra.Spectrum`` (duck-typed, so no numpy import)."""
        return cls(
            object_id=spectrum.object_id,
            survey=spectrum.survey,
            source=spectrum.source,
            redshift=float(spectrum.redshift),
        )


@dataclass(frozen=True)
class ImageRef:
    png: bytes
    wavelength_range: tuple[float, float] | None = None  # the range shown, when known
    label: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.png, bytes) or not self.png.startswith(PNG_SIGNATURE):
            start = self.png[:8] if isinstance(self.png, bytes) else type(self.png).__name__
            raise TrajectoryFormatError(f"ImageRef.png must be PNG bytes; got {start!r}")
        if self.wavelength_range is not None:
            object.__setattr__(
                self, "wavelength_range", _float_pair(self.wavelength_range, "ImageRef range")
            )


@dataclass(frozen=True)
class ToolResponse:
    """What came back for a step: the tool's observation, or the loop's error feedback."""

    ok: bool
    text: str
    image: ImageRef | None = None

    @classmethod
    def from_tool_result(cls, result: Any) -> ToolResponse:
        """From an ``agent.tool.ToolResult`` (duck-typed: ok, text, png, wavelength_range, label)."""
        image = None
        if result.png is not None:
            image = ImageRef(result.png, result.wavelength_range, result.label)
        return cls(ok=bool(result.ok), text=result.text, image=image)


@dataclass(frozen=True)
class FinalAnswer:
    prediction: str | None  # "YES", "NO", or None when the answer had no valid box
    justification: str

    def __post_init__(self) -> None:
        if self.prediction is not None and self.prediction not in parsing.PREDICTIONS:
            raise TrajectoryFormatError(
                f"answer prediction must be YES, NO or None; got {self.prediction!r}"
            )


@dataclass
class Step:
    index: int
    assistant_text: str  # raw model output for this turn
    think: str | None = None
    tool_call: ToolCall | None = None
    tool_result: ToolResponse | None = None
    generate_s: float | None = None
    tool_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @classmethod
    def from_output(
        cls,
        index: int,
        assistant_text: str,
        *,
        tool_result: ToolResponse | None = None,
        generate_s: float | None = None,
        tool_s: float | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> Step:
        """A step whose think and tool call come from parsing ``assistant_text``."""
        parsed = parsing.parse_turn(assistant_text)
        return cls(
            index=index,
            assistant_text=assistant_text,
            think=parsed.think,
            tool_call=parsed.tool_call,
            tool_result=tool_result,
            generate_s=generate_s,
            tool_s=tool_s,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    def parsed(self) -> parsing.ParsedTurn:
        return parsing.parse_turn(self.assistant_text)


@dataclass
class Trajectory:
    id: str
    task: str  # task code, e.g. "CV"
    spectrum: SpectrumRef
    system_prompt: str
    user_prompt: str  # T0, with exactly one <image> placeholder for I0
    initial_image: ImageRef  # I0
    steps: list[Step] = field(default_factory=list)
    answer: FinalAnswer | None = None
    stop_reason: str | None = None  # one of STOP_REASONS; None while running or when unknown
    format_ok: bool | None = None  # f_fmt of paper eq. 3; None until finalized
    format_reasons: list[str] = field(default_factory=list)
    n_tool_calls: int = 0
    n_tool_errors: int = 0
    errors: list[str] = field(default_factory=list)  # run-level problems (policy failures)
    policy: dict[str, Any] = field(default_factory=dict)  # name, model, sampling, code version
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            uuid.UUID(self.id)
        except (ValueError, TypeError, AttributeError) as error:
            raise TrajectoryFormatError(
                f"trajectory id must be a UUID string; got {self.id!r}"
            ) from error
        if not isinstance(self.task, str) or not self.task.strip():
            raise TrajectoryFormatError(f"trajectory task must be a task code; got {self.task!r}")
        count = (
            self.user_prompt.count(IMAGE_PLACEHOLDER) if isinstance(self.user_prompt, str) else -1
        )
        if count != 1:
            raise TrajectoryFormatError(
                f"user_prompt must contain exactly one {IMAGE_PLACEHOLDER} placeholder "
                f"(where I0 is shown); found {count}"
            )
        _check_stop_reason(self.stop_reason)

    @classmethod
    def new(
        cls,
        *,
        task: str,
        spectrum: SpectrumRef,
        system_prompt: str,
        user_prompt: str,
        initial_image: ImageRef,
        policy: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Trajectory:
        """A fresh trajectory with a random id and no steps."""
        return cls(
            id=str(uuid.uuid4()),
            task=task,
            spectrum=spectrum,
            system_prompt=system_prompt,
            user_prompt=user_prompt,
            initial_image=initial_image,
            policy=dict(policy or {}),
            meta=dict(meta or {}),
        )

    # --- outcome ---------------------------------------------------------------------------

    def finalize(self, stop_reason: str | None) -> None:
        """Set the stop reason and recompute answer, f_fmt and counts from the steps."""
        _check_stop_reason(stop_reason)
        self.stop_reason = stop_reason
        parsed_last = self.steps[-1].parsed() if self.steps else None
        if parsed_last is not None and parsed_last.answer is not None:
            answer = parsed_last.answer
            self.answer = FinalAnswer(answer.prediction, answer.justification)
        else:
            self.answer = None
        check = parsing.format_ok([step.assistant_text for step in self.steps])
        self.format_ok, self.format_reasons = check.ok, list(check.reasons)
        self.n_tool_calls = sum(
            1
            for step in self.steps
            if step.tool_call is not None
            and step.tool_call.executable
            and step.tool_result is not None
        )
        self.n_tool_errors = sum(
            1 for step in self.steps if step.tool_result is not None and not step.tool_result.ok
        )

    # --- views -----------------------------------------------------------------------------

    def images(self) -> list[bytes]:
        """PNG bytes of I0 then every tool image, in conversation order."""
        return [self.initial_image.png] + [
            step.tool_result.image.png
            for step in self.steps
            if step.tool_result is not None and step.tool_result.image is not None
        ]

    def final_text(self) -> str:
        """The last assistant turn's raw text ("" before the first step)."""
        return self.steps[-1].assistant_text if self.steps else ""

    # --- serialization ---------------------------------------------------------------------

    def to_dict(self, *, png: PngEncoder | None = None) -> dict[str, Any]:
        """A JSON-safe dict (PNG as base64); ``from_dict`` restores an equal trajectory.

        ``png`` writes each image's PNG some other way (the web app stores a hash instead).
        """
        png = png or png_as_base64
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise TrajectoryFormatError(
                    f"trajectory {self.id}: step at position {position} has index {step.index}"
                )
        return {
            "schema": SCHEMA_VERSION,
            "id": self.id,
            "task": self.task,
            "spectrum": _spectrum_to_dict(self.spectrum),
            "system_prompt": self.system_prompt,
            "user_prompt": self.user_prompt,
            "initial_image": _image_to_dict(self.initial_image, png),
            "steps": [_step_to_dict(step, png) for step in self.steps],
            "answer": None
            if self.answer is None
            else {"prediction": self.answer.prediction, "justification": self.answer.justification},
            "stop_reason": self.stop_reason,
            "format_ok": self.format_ok,
            "format_reasons": list(self.format_reasons),
            "n_tool_calls": self.n_tool_calls,
            "n_tool_errors": self.n_tool_errors,
            "errors": list(self.errors),
            "policy": self.policy,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        reader = _Reader(data, "trajectory")
        schema = reader.get("schema", int)
        if schema != SCHEMA_VERSION:
            raise TrajectoryFormatError(
                f"trajectory schema {schema} is not supported (expected {SCHEMA_VERSION})"
            )
        answer_data = reader.get("answer", dict, optional=True)
        answer = None
        if answer_data is not None:
            answer_reader = _Reader(answer_data, "trajectory.answer")
            answer = FinalAnswer(
                answer_reader.get("prediction", str, optional=True),
                answer_reader.get("justification", str),
            )
            answer_reader.done()
        trajectory = cls(
            id=reader.get("id", str),
            task=reader.get("task", str),
            spectrum=_spectrum_from_dict(reader.get("spectrum", dict)),
            system_prompt=reader.get("system_prompt", str),
            user_prompt=reader.get("user_prompt", str),
            initial_image=_image_from_dict(reader.get("initial_image", dict), "initial_image"),
            steps=[
                _step_from_dict(step, f"steps[{i}]")
                for i, step in enumerate(reader.get("steps", list))
            ],
            answer=answer,
            stop_reason=reader.get("stop_reason", str, optional=True),
            format_ok=reader.get("format_ok", bool, optional=True),
            format_reasons=_str_list(reader.get("format_reasons", list), "format_reasons"),
            n_tool_calls=reader.get("n_tool_calls", int),
            n_tool_errors=reader.get("n_tool_errors", int),
            errors=_str_list(reader.get("errors", list), "errors"),
            policy=reader.get("policy", dict),
            meta=reader.get("meta", dict),
        )
        reader.done()
        return trajectory

    def to_json(self, *, indent: int | None = None) -> str:
        try:
            return json.dumps(
                self.to_dict(), ensure_ascii=False, sort_keys=True, allow_nan=False, indent=indent
            )
        except (TypeError, ValueError) as error:
            raise TrajectoryFormatError(
                f"trajectory {self.id} is not JSON-safe (check policy and meta): {error}"
            ) from error

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        try:
            data = bounded_json.loads(text, what="trajectory JSON")
        except ValueError as error:
            raise TrajectoryFormatError(f"trajectory JSON is invalid: {error}") from error
        if not isinstance(data, dict):
            raise TrajectoryFormatError("trajectory JSON must be an object")
        return cls.from_dict(data)


# --- messages for a policy ---------------------------------------------------------------------


def tool_response_text(response: ToolResponse) -> str:
    """The user-turn text of a tool response, with an <image> placeholder where the image goes."""
    image = IMAGE_PLACEHOLDER if response.image is not None else ""
    return f"{TOOL_RESPONSE_OPEN}{image}{response.text}{TOOL_RESPONSE_CLOSE}"


def conversation_turns(trajectory: Trajectory) -> list[tuple[str, str]]:
    """(role, text) after the system prompt; ``<image>`` marks where each image goes."""
    turns = [("user", trajectory.user_prompt)]
    for step in trajectory.steps:
        turns.append(("assistant", step.assistant_text))
        if step.tool_result is not None:
            turns.append(("user", tool_response_text(step.tool_result)))
    return turns


def split_placeholders(text: str) -> list[str | None]:
    """Text pieces in order, with None for each ``<image>``; empty pieces are left out."""
    pieces: list[str | None] = []
    for position, piece in enumerate(text.split(IMAGE_PLACEHOLDER)):
        if position:
            pieces.append(None)
        if piece:
            pieces.append(piece)
    return pieces


def to_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The policy message list of common.md: system, user [I0, T0], then each step's turns."""
    images = iter(trajectory.images())
    messages: list[dict[str, Any]] = []
    if trajectory.system_prompt:
        messages.append(
            {"role": "system", "content": [{"type": "text", "text": trajectory.system_prompt}]}
        )
    for role, text in conversation_turns(trajectory):
        messages.append({"role": role, "content": _parts(text, images, role)})
    return messages


def _parts(text: str, images: Iterator[bytes], role: str) -> list[dict[str, Any]]:
    if role == "assistant":  # model output is text; an "<image>" it wrote stays text
        return [{"type": "text", "text": text}]
    return [
        {"type": "text", "text": piece}
        if piece is not None
        else {"type": "image", "png": next(images)}
        for piece in split_placeholders(text)
    ]


# --- dict helpers ------------------------------------------------------------------------------


def _check_stop_reason(stop_reason: str | None) -> None:
    if stop_reason is not None and stop_reason not in STOP_REASONS:
        raise TrajectoryFormatError(
            f"stop_reason {stop_reason!r} is not one of {', '.join(STOP_REASONS)}"
        )


def _float_pair(value: Any, what: str) -> tuple[float, float]:
    if (
        isinstance(value, str | bytes)
        or not hasattr(value, "__len__")
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        or not all(math.isfinite(v) for v in value)
    ):
        raise TrajectoryFormatError(f"{what} must be two finite numbers; got {value!r}")
    return float(value[0]), float(value[1])


def _optional_pair(value: Any, what: str) -> tuple[float, float] | None:
    return None if value is None else _float_pair(value, what)


def _pair_to_list(value: tuple[float, float] | None) -> list[float] | None:
    return None if value is None else [value[0], value[1]]


def _spectrum_to_dict(ref: SpectrumRef) -> dict[str, Any]:
    return {
        "object_id": ref.object_id,
        "survey": ref.survey,
        "source": ref.source,
        "redshift": ref.redshift,
    }


def _spectrum_from_dict(data: dict[str, Any]) -> SpectrumRef:
    reader = _Reader(data, "spectrum")
    ref = SpectrumRef(
        object_id=reader.get("object_id", str),
        survey=reader.get("survey", str),
        source=reader.get("source", str),
        redshift=reader.get("redshift", float, optional=True),
    )
    reader.done()
    return ref


# The key and value that stand for an image's PNG in a trajectory's dict.
PngEncoder = Callable[[bytes], tuple[str, str]]


def png_as_base64(png: bytes) -> tuple[str, str]:
    return "png_base64", base64.b64encode(png).decode("ascii")


def _image_to_dict(image: ImageRef, png: PngEncoder) -> dict[str, Any]:
    key, value = png(image.png)
    return {
        key: value,
        "wavelength_range": _pair_to_list(image.wavelength_range),
        "label": image.label,
    }


def _image_from_dict(data: dict[str, Any], where: str) -> ImageRef:
    reader = _Reader(data, where)
    encoded = reader.get("png_base64", str)
    try:
        png = base64.b64decode(encoded, validate=True)
    except ValueError as error:
        raise TrajectoryFormatError(f"{where}.png_base64 is not base64: {error}") from error
    image = ImageRef(
        png=png,
        wavelength_range=_optional_pair(
            reader.get("wavelength_range", list, optional=True), f"{where}.wavelength_range"
        ),
        label=reader.get("label", str, optional=True),
    )
    reader.done()
    return image


def _tool_call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "name": call.name,
        "arguments": call.arguments,
        "raw": call.raw,
        "wavelength_range": _pair_to_list(call.wavelength_range),
        "label": call.label,
    }


def _tool_call_from_dict(data: dict[str, Any], where: str) -> ToolCall:
    reader = _Reader(data, where)
    call = ToolCall(
        name=reader.get("name", str),
        arguments=reader.get("arguments", dict),
        raw=reader.get("raw", str),
        wavelength_range=_optional_pair(
            reader.get("wavelength_range", list, optional=True), f"{where}.wavelength_range"
        ),
        label=reader.get("label", str, optional=True),
    )
    reader.done()
    return call


def _step_to_dict(step: Step, png: PngEncoder) -> dict[str, Any]:
    result = step.tool_result
    return {
        "index": step.index,
        "assistant_text": step.assistant_text,
        "think": step.think,
        "tool_call": None if step.tool_call is None else _tool_call_to_dict(step.tool_call),
        "tool_result": None
        if result is None
        else {
            "ok": result.ok,
            "text": result.text,
            "image": None if result.image is None else _image_to_dict(result.image, png),
        },
        "generate_s": step.generate_s,
        "tool_s": step.tool_s,
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
    }


def _step_from_dict(data: Any, where: str) -> Step:
    if not isinstance(data, dict):
        raise TrajectoryFormatError(f"{where} must be an object; got {type(data).__name__}")
    reader = _Reader(data, where)
    call_data = reader.get("tool_call", dict, optional=True)
    result_data = reader.get("tool_result", dict, optional=True)
    result = None
    if result_data is not None:
        result_reader = _Reader(result_data, f"{where}.tool_result")
        image_data = result_reader.get("image", dict, optional=True)
        result = ToolResponse(
            ok=result_reader.get("ok", bool),
            text=result_reader.get("text", str),
            image=None
            if image_data is None
            else _image_from_dict(image_data, f"{where}.tool_result.image"),
        )
        result_reader.done()
    step = Step(
        index=reader.get("index", int),
        assistant_text=reader.get("assistant_text", str),
        think=reader.get("think", str, optional=True),
        tool_call=None
        if call_data is None
        else _tool_call_from_dict(call_data, f"{where}.tool_call"),
        tool_result=result,
        generate_s=reader.get("generate_s", float, optional=True),
        tool_s=reader.get("tool_s", float, optional=True),
        prompt_tokens=reader.get("prompt_tokens", int, optional=True),
        completion_tokens=reader.get("completion_tokens", int, optional=True),
    )
    reader.done()
    return step


def _str_list(value: list[Any], where: str) -> list[str]:
    if not all(isinstance(item, str) for item in value):
        raise TrajectoryFormatError(f"{where} must be a list of strings")
    return list(value)


class _Reader:
    """Reads the keys of one serialized object, checking types, and refuses unknown keys."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        if not isinstance(data, dict):
            raise TrajectoryFormatError(f"{where} must be an object; got {type(data).__name__}")
        self.data, self.where = data, where
        self.seen: set[str] = set()

    def get(self, key: str, kind: type, *, optional: bool = False) -> Any:
        self.seen.add(key)
        if key not in self.data:
            raise TrajectoryFormatError(f"{self.where} is missing {key!r}")
        value = self.data[key]
        if value is None and optional:
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TrajectoryFormatError(
                f"{self.where}.{key} must be {kind.__name__}; got {type(value).__name__}"
            )
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise TrajectoryFormatError(f"{self.where} has unknown keys {unknown}")


def step_to_dict(step: Step, *, png: PngEncoder | None = None) -> dict[str, Any]:
    """One step as a JSON-safe dict (the live view stores steps as they happen)."""
    return _step_to_dict(step, png or png_as_base64)


def step_from_dict(data: dict[str, Any]) -> Step:
    return _step_from_dict(data, "step")
