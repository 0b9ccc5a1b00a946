"""Expert edits of a trajectory and the deterministic iMCoT standardizer.

An expert edits a trajectory as structured steps (reasoning, tool range, label) and a final
answer; `apply_edit` turns that into a canonical trajectory whose tool images are re-rendered
from the spectrum, so what the expert sees is exactly what the model will be trained on.
`standardize` rewrites an approved trajectory into the clean iMCoT form without changing any
tool action; `tool_actions` is what the check compares.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent import parsing
from agent.tool import TOOL_NAME, SpectralVisualizationTool
from agent.trajectory import Step, ToolResponse, Trajectory

MAX_THINK_CHARS = 8000
MAX_JUSTIFICATION_CHARS = 4000


class EditError(ValueError):
    """An edit that cannot become a valid trajectory; the message names the step and field."""


@dataclass(frozen=True)
class EditedStep:
    think: str
    wavelength_range: tuple[float, float]
    label: str = ""


@dataclass(frozen=True)
class EditedAnswer:
    think: str
    prediction: str  # "YES" | "NO"
    justification: str


@dataclass(frozen=True)
class ToolAction:
    name: str
    wavelength_range: tuple[float, float] | None
    label: str | None


def tool_call_text(wavelength_range: Sequence[float], label: str) -> str:
    arguments: dict[str, Any] = {"wavelength_range": [float(v) for v in wavelength_range]}
    if label:
        arguments["label"] = label
    return json.dumps({"name": TOOL_NAME, "arguments": arguments}, ensure_ascii=False)


def step_text(think: str, wavelength_range: Sequence[float], label: str) -> str:
    return (
        f"<think>{think.strip()}</think>\n"
        f"<tool_call>{tool_call_text(wavelength_range, label)}</tool_call>"
    )


def answer_text(think: str, prediction: str, justification: str) -> str:
    return (
        f"<think>{think.strip()}</think>\n"
        f"<answer>\\boxed{{{prediction}}} {justification.strip()}</answer>"
    )


def _check_text(value: str, limit: int, where: str) -> str:
    if not isinstance(value, str):
        raise EditError(f"{where} must be text")
    if re.search(r"</?(think|tool_call|answer)>", value):
        raise EditError(f"{where} must not contain <think>, <tool_call> or <answer> tags")
    if len(value) > limit:
        raise EditError(f"{where} is {len(value)} characters; the limit is {limit}")
    return value


def _check_range(value: Any, where: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise EditError(f"{where} must be two numbers [min, max] in Angstrom") from None
    if not (low == low and high == high) or low >= high or low <= 0:
        raise EditError(f"{where} must satisfy 0 < min < max; got [{low}, {high}]")
    return low, high


def apply_edit(
    base: Trajectory,
    *,
    tool: SpectralVisualizationTool,
    steps: Sequence[EditedStep],
    answer: EditedAnswer,
) -> Trajectory:
    """A new trajectory with the edited steps (images re-rendered) and the edited answer."""
    if answer.prediction not in parsing.PREDICTIONS:
        raise EditError(f"answer prediction must be YES or NO; got {answer.prediction!r}")
    new_steps: list[Step] = []
    for index, edit in enumerate(steps):
        think = _check_text(edit.think, MAX_THINK_CHARS, f"step {index + 1} reasoning")
        low, high = _check_range(edit.wavelength_range, f"step {index + 1} wavelength range")
        label = _check_text(edit.label or "", 60, f"step {index + 1} label").strip()
        started = time.perf_counter()
        result = tool.render((low, high), label=label or None)
        if not result.ok:
            raise EditError(
                f"step {index + 1}: the tool cannot show [{low}, {high}]: {result.text}"
            )
        new_steps.append(
            Step.from_output(
                index,
                step_text(think, (low, high), label),
                tool_result=ToolResponse.from_tool_result(result),
                tool_s=time.perf_counter() - started,
            )
        )
    final_think = _check_text(answer.think, MAX_THINK_CHARS, "final reasoning")
    justification = _check_text(answer.justification, MAX_JUSTIFICATION_CHARS, "justification")
    new_steps.append(
        Step.from_output(len(new_steps), answer_text(final_think, answer.prediction, justification))
    )
    edited = replace(
        base,
        steps=new_steps,
        answer=None,
        errors=[],
        meta={**base.meta, "edited": True},
    )
    edited.finalize("answer")
    return edited


def edit_from_trajectory(trajectory: Trajectory) -> tuple[list[EditedStep], EditedAnswer]:
    """The structured form of a trajectory, as the revision editor shows it."""
    steps: list[EditedStep] = []
    final = EditedAnswer(think="", prediction="NO", justification="")
    for step in trajectory.steps:
        parsed = step.parsed()
        if parsed.answer is not None:
            final = EditedAnswer(
                think=parsed.think or "",
                prediction=parsed.answer.prediction or "NO",
                justification=parsed.answer.justification,
            )
        elif parsed.tool_call is not None and parsed.tool_call.wavelength_range is not None:
            low, high = sorted(parsed.tool_call.wavelength_range)
            steps.append(EditedStep(parsed.think or "", (low, high), parsed.tool_call.label or ""))
    return steps, final


def tool_actions(trajectory: Trajectory) -> list[ToolAction]:
    """The tool calls a trajectory makes, in order (what standardization must not change)."""
    actions = []
    for step in trajectory.steps:
        call = step.tool_call
        if call is None:
            continue
        wavelength_range = None
        if call.wavelength_range is not None:
            wavelength_range = (
                round(float(call.wavelength_range[0]), 2),
                round(float(call.wavelength_range[1]), 2),
            )
        actions.append(ToolAction(call.name, wavelength_range, (call.label or "").strip() or None))
    return actions


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\t", " ")
    text = re.sub(r"[ \u00a0]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


# A wavelength range quoted in prose: "6500–6630 Å", "6500-6630", "6500.5 to 6630 A".
_QUOTED_RANGE = re.compile(
    r"(?<![\d.])(\d{3,5}(?:\.\d+)?)(\s*(?:–|—|-|to)\s*)(\d{3,5}(?:\.\d+)?)(?!\d|\.\d)"
)
RANGE_TOLERANCE_A = 0.5  # tool ranges are stored to 0.01 Å; prose rounds to whole Å


@dataclass(frozen=True)
class QuotedRange:
    low: float
    high: float
    start: int
    end: int


def quoted_ranges(text: str) -> list[QuotedRange]:
    """Wavelength ranges the prose cites (low < high, both in the optical/NIR, 300-30000 Å)."""
    found = []
    for match in _QUOTED_RANGE.finditer(text):
        low, high = float(match.group(1)), float(match.group(3))
        if 300 <= low < high <= 30000:
            found.append(QuotedRange(low, high, match.start(), match.end()))
    return found


def _same_range(quoted: QuotedRange, call: Sequence[float]) -> bool:
    low, high = sorted(float(value) for value in call)
    return (
        abs(quoted.low - low) <= RANGE_TOLERANCE_A and abs(quoted.high - high) <= RANGE_TOLERANCE_A
    )


def _stray_ranges(think: str, call: Sequence[float]) -> list[QuotedRange]:
    """Cited ranges that look like an earlier version of the window the call shows: none of
    the cited ranges is that window, and these overlap it while reaching outside it. A feature
    inside the window ("the 6750-7000 band") and another window ("H-beta at 4820-4905") are
    not stray."""
    quoted = quoted_ranges(think)
    if any(_same_range(q, call) for q in quoted):
        return []
    low, high = sorted(float(value) for value in call)
    return [
        q
        for q in quoted
        if q.low < high
        and q.high > low  # overlaps the window
        and (q.low < low - RANGE_TOLERANCE_A or q.high > high + RANGE_TOLERANCE_A)
    ]


def range_mismatch(think: str, call: Sequence[float]) -> str | None:
    """A sentence when the step's prose cites a window its tool call does not show (a reviser
    narrowed the window but left the text); None when consistent."""
    stray = _stray_ranges(think, call)
    if not stray:
        return None
    low, high = sorted(float(value) for value in call)
    cited = ", ".join(f"{q.low:g}–{q.high:g} Å" for q in stray)
    return f"the reasoning cites {cited} but the tool call shows {low:g}–{high:g} Å"


def align_quoted_range(think: str, call: Sequence[float]) -> tuple[str, str | None]:
    """(think, problem): a single stray cited range is rewritten to the call's range; several
    are left for an expert to resolve (the problem sentence)."""
    stray = _stray_ranges(think, call)
    if not stray:
        return think, None
    if len(stray) != 1:
        return think, range_mismatch(think, call)
    only = stray[0]
    low, high = sorted(float(value) for value in call)
    separator = _QUOTED_RANGE.match(think, only.start).group(2)  # type: ignore[union-attr]
    fixed = f"{low:g}{separator}{high:g}"
    return think[: only.start] + fixed + think[only.end :], None


def standardize(trajectory: Trajectory) -> Trajectory:
    """The deterministic iMCoT normalizer: canonical tags, call JSON and spacing.

    Each turn becomes `<think>...</think>` followed by exactly one canonical
    `<tool_call>{json}</tool_call>` or the final `<answer>\\boxed{X} justification</answer>`;
    tool actions and results are kept as they are.
    """
    steps: list[Step] = []
    problems: list[str] = []
    for step in trajectory.steps:
        parsed = step.parsed()
        think = _clean(parsed.think or "")
        if parsed.answer is not None and parsed.answer.prediction in parsing.PREDICTIONS:
            text = answer_text(think, parsed.answer.prediction, _clean(parsed.answer.justification))
        elif parsed.tool_call is not None and parsed.tool_call.wavelength_range is not None:
            # The prose must cite the window the call shows (a reviser may have narrowed it).
            think, problem = align_quoted_range(think, parsed.tool_call.wavelength_range)
            if problem is not None:
                problems.append(f"step {len(steps) + 1}: {problem}")
            text = step_text(
                think, parsed.tool_call.wavelength_range, (parsed.tool_call.label or "").strip()
            )
        else:
            text = step.assistant_text.strip()
        steps.append(replace(step, assistant_text=text, think=parsing.parse_turn(text).think))
    meta = {**trajectory.meta, "standardized": True}
    if problems:
        meta["range_mismatches"] = problems
    else:
        meta.pop("range_mismatches", None)
    result = replace(trajectory, steps=steps, meta=meta)
    result.finalize(trajectory.stop_reason)
    return result


def check_same_tool_actions(before: Trajectory, after: Trajectory) -> list[str]:
    """Differences in tool actions between two trajectories, as sentences (empty when equal)."""
    old, new = tool_actions(before), tool_actions(after)
    problems = []
    if len(old) != len(new):
        problems.append(f"the number of tool calls changed from {len(old)} to {len(new)}")
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            problems.append(
                f"tool call {index + 1} changed from {a.wavelength_range} '{a.label or ''}' "
                f"to {b.wavelength_range} '{b.label or ''}'"
            )
    if before.answer and after.answer and before.answer.prediction != after.answer.prediction:
        problems.append(
            f"the answer changed from {before.answer.prediction} to {after.answer.prediction}"
        )
    return problems
