"""Inspection tasks as data: question, expert guideline, diagnostic windows and contaminants.

The definitions live in ``agent/data/tasks.json`` (rest-frame vacuum Angstrom) so an expert can
add or edit a task without code; the web app stores the same dicts and rebuilds ``Task`` values
with :func:`task_from_dict`. The prompt T0 (paper Table 6), the rule-based inspector and the line
markers of the live plots are all built from these values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TASKS_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"
TOOL_NAME = "spectral_visualization_tool"
WINDOW_KINDS = ("emission", "absorption", "band", "continuum")
SPECVI_BENCH_CODES = {"cv": "CV", "cc": "CS", "ss": "SS", "gm": "MG", "wd": "WD"}

_TASK_FIELDS = ("code", "name", "question", "guideline", "windows", "contaminants", "synthetic")
_WINDOW_FIELDS = ("name", "rest_range", "lines", "kind", "look_for")
_CODE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

_INSTRUCTION = (
    "Think first, call `spectral_visualization_tool` if needed to examine features in detail, "
    "then provide your final answer. Your response must adhere to the following strict rules:"
)
_STRICT_RULES = (
    "1. Overall Structure: Your response must follow the format <think>...</think> "
    "<tool_call>...</tool_call> (if a tool is used) <answer>...</answer>.",
    "2. Tool Usage Constraint: You may only make one tool call per turn.",
    "3. Final Answer Format: In the <answer> tag, your conclusion must be inside a \\boxed{} "
    "command (e.g., \\boxed{YES} or \\boxed{NO}), followed by your justification.",
)
_TOOL_CALL_EXAMPLE = (
    '<tool_call>{"name": "spectral_visualization_tool", "arguments": '
    '{"wavelength_range": [6500, 6650], "label": "H-alpha"}}</tool_call>'
)


class UnknownTaskError(ValueError, LookupError):
    """A task code that is neither a task code nor a SpecVI-Bench code."""


@dataclass(frozen=True)
class DiagnosticWindow:
    name: str  # "H-alpha", "C2 Swan 5165", "TiO 7054"
    rest_range: tuple[float, float]  # vacuum Angstrom, rest frame, window to inspect
    lines: tuple[float, ...]  # vacuum rest wavelengths of the features inside (centres / heads)
    kind: str  # "emission" | "absorption" | "band" | "continuum"
    look_for: str  # what an expert checks there (one sentence)


@dataclass(frozen=True)
class Task:
    code: str  # "CV", "CS", "SS", "MG", "WD", "O", "B", "A"
    name: str  # "Cataclysmic Variables (CV)"
    question: str  # 'Analyze the provided spectrum to determine if it is a "..."'
    guideline: str  # multi-line expert guideline, paper Table 6 style
    windows: tuple[DiagnosticWindow, ...]
    contaminants: tuple[str, ...]  # human-readable confusers
    synthetic: bool = False  # unused for now


def get_task(code: str) -> Task:
    """The built-in task for ``code`` (case-insensitive; SpecVI-Bench codes cv/cc/ss/gm/wd too)."""
    if not isinstance(code, str):
        raise UnknownTaskError(f"task code must be a string, got {type(code).__name__}")
    key = code.strip()
    canonical = SPECVI_BENCH_CODES.get(key.lower(), key.upper())
    tasks = _builtin_tasks_by_code()
    if canonical not in tasks:
        known = ", ".join(sorted(tasks)) + "; SpecVI-Bench: " + ", ".join(SPECVI_BENCH_CODES)
        raise UnknownTaskError(f"unknown task code {code!r} (known: {known})")
    return tasks[canonical]


def all_tasks() -> list[Task]:
    """Every built-in task, in the order of the definitions file."""
    return list(_builtin_tasks_by_code().values())


def build_prompt(task: Task) -> str:
    """The user prompt T0 of paper Table 6: image placeholder, question, guideline, rules."""
    parts = ["<image>", task.question.strip()]
    if task.guideline.strip():
        parts.append(task.guideline.strip())
    parts.append(_INSTRUCTION)
    parts.extend(_STRICT_RULES)
    return "\n".join(parts)


def tool_description() -> dict[str, Any]:
    """JSON-schema-like description of the visualization tool."""
    return {
        "name": TOOL_NAME,
        "description": (
            "Renders the cached spectrum over a wavelength window given in rest-frame Angstrom "
            "and returns the plot image, so narrow features can be examined in detail."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "wavelength_range": {
                    "type": "array",
                    "items": {"type": "number"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "[min, max] in rest-frame Angstrom, with min < max.",
                },
                "label": {
                    "type": "string",
                    "description": "Optional name of the feature being examined, e.g. H-alpha.",
                },
            },
            "required": ["wavelength_range"],
        },
    }


def system_prompt() -> str:
    """Short system prompt stating the tool and its exact call syntax."""
    schema = json.dumps(tool_description(), ensure_ascii=False)
    return "\n".join(
        [
            "You are an expert astronomer who inspects one-dimensional optical spectra.",
            f"You can call one tool, {TOOL_NAME}: {schema}",
            "Call it with exactly this syntax, one call per turn:",
            _TOOL_CALL_EXAMPLE,
            "The tool answers with a plot of the requested window. When you are done, give "
            "<answer>\\boxed{YES} or \\boxed{NO} followed by your justification</answer>.",
        ]
    )


def load_task_definitions(path: Path | str | None = None) -> list[Task]:
    """Read and validate a task definitions file (default: the built-in ``tasks.json``)."""
    source = Path(path) if path is not None else TASKS_PATH
    try:
        document = json.loads(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"task definitions {source}: cannot be read ({error})") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"task definitions {source}: not valid JSON ({error})") from error
    if not isinstance(document, Mapping) or not isinstance(document.get("tasks"), list):
        raise ValueError(f"task definitions {source}: expected an object with a 'tasks' list")
    frame = document.get("wavelength_frame")
    if frame != "vacuum":
        raise ValueError(
            f"task definitions {source}: 'wavelength_frame' must be 'vacuum', got {frame!r}"
        )
    tasks = []
    for position, entry in enumerate(document["tasks"]):
        try:
            tasks.append(task_from_dict(entry))
        except ValueError as error:
            raise ValueError(f"task definitions {source}, task #{position}: {error}") from error
    codes = [task.code.upper() for task in tasks]
    duplicates = sorted({code for code in codes if codes.count(code) > 1})
    if duplicates:
        raise ValueError(f"task definitions {source}: duplicate task codes {duplicates}")
    return tasks


def task_from_dict(data: Mapping[str, Any]) -> Task:
    """Build a validated ``Task`` from a plain dict (JSON file entry or database row)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"task must be a mapping, got {type(data).__name__}")
    _reject_unknown_fields(data, _TASK_FIELDS, "task")
    code = _required_text(data, "code", "task")
    if not _CODE_PATTERN.match(code):
        raise ValueError(
            f"task field 'code' must be 1-32 letters, digits, '_' or '-', got {code!r}"
        )
    where = f"task {code}"
    windows_data = data.get("windows", [])
    if not isinstance(windows_data, list | tuple):
        raise ValueError(f"{where}: field 'windows' must be a list")
    contaminants = data.get("contaminants", [])
    if not isinstance(contaminants, list | tuple) or not all(
        isinstance(item, str) and item.strip() for item in contaminants
    ):
        raise ValueError(f"{where}: field 'contaminants' must be a list of non-empty strings")
    synthetic = data.get("synthetic", False)
    if not isinstance(synthetic, bool):
        raise ValueError(f"{where}: field 'synthetic' must be true or false")
    guideline = data.get("guideline", "")
    if not isinstance(guideline, str):
        raise ValueError(f"{where}: field 'guideline' must be a string")
    return Task(
        code=code,
        name=_required_text(data, "name", where),
        question=_required_text(data, "question", where),
        guideline=guideline,
        windows=tuple(
            _window_from_dict(item, f"{where}, window #{position}")
            for position, item in enumerate(windows_data)
        ),
        contaminants=tuple(item.strip() for item in contaminants),
        synthetic=synthetic,
    )


def task_to_dict(task: Task) -> dict[str, Any]:
    """Plain JSON-safe dict; ``task_from_dict(task_to_dict(t)) == t``."""
    return {
        "code": task.code,
        "name": task.name,
        "question": task.question,
        "guideline": task.guideline,
        "windows": [
            {
                "name": window.name,
                "rest_range": [window.rest_range[0], window.rest_range[1]],
                "lines": list(window.lines),
                "kind": window.kind,
                "look_for": window.look_for,
            }
            for window in task.windows
        ],
        "contaminants": list(task.contaminants),
        "synthetic": task.synthetic,
    }


@cache
def _builtin_tasks_by_code() -> dict[str, Task]:
    return {task.code.upper(): task for task in load_task_definitions()}


def _window_from_dict(data: Any, where: str) -> DiagnosticWindow:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: must be a mapping, got {type(data).__name__}")
    _reject_unknown_fields(data, _WINDOW_FIELDS, where)
    name = _required_text(data, "name", where)
    where = f"{where} ({name})"
    low, high = _rest_range(data.get("rest_range"), where)
    lines = _lines(data.get("lines", []), where)
    outside = [line for line in lines if not low <= line <= high]
    if outside:
        raise ValueError(f"{where}: field 'lines' has {outside} outside rest_range [{low}, {high}]")
    kind = _required_text(data, "kind", where)
    if kind not in WINDOW_KINDS:
        raise ValueError(f"{where}: field 'kind' must be one of {WINDOW_KINDS}, got {kind!r}")
    return DiagnosticWindow(
        name=name,
        rest_range=(low, high),
        lines=lines,
        kind=kind,
        look_for=_required_text(data, "look_for", where),
    )


def _rest_range(value: Any, where: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"{where}: field 'rest_range' must be [min, max], got {value!r}")
    low, high = (_finite_number(item, "rest_range", where) for item in value)
    if low <= 0 or high <= 0:
        raise ValueError(f"{where}: field 'rest_range' must be positive, got [{low}, {high}]")
    if not low < high:
        raise ValueError(f"{where}: field 'rest_range' must be increasing, got [{low}, {high}]")
    return low, high


def _lines(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: field 'lines' must be a list of wavelengths, got {value!r}")
    return tuple(_finite_number(item, "lines", where) for item in value)


def _finite_number(value: Any, field: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: field '{field}' must hold finite numbers, got {value!r}")
    return float(value)


def _required_text(data: Mapping[str, Any], field: str, where: str) -> str:
    value = data.get(field)
    if value is None:
        raise ValueError(f"{where}: field '{field}' is missing")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field '{field}' must be a non-empty string, got {value!r}")
    return value.strip()


def _reject_unknown_fields(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(key) for key in data if key not in allowed)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown} (allowed: {list(allowed)})")
