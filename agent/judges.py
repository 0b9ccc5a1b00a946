"""LLM judges of reasoning trajectories: the rubric prompt, the blinded messages, the score parser.

A judge reads the task question and the whole trajectory (reasoning, tool calls, tool
observations, and the plots as image parts when it takes images) and rates it on the 0-5 rubric
of paper Table 7 (``agent.agreement.RUBRIC``), so its scores can be compared with the experts'.

Blinding: the messages never contain the trajectory's ``policy`` (model name, checkpoint,
sampling), its system prompt, or its ``meta``; only what the model wrote and what it was shown.

Score parsing (``parse_judge_score``) reads explicit score statements only: ``Score: 4``,
``**Score:** 4/5``, ``score = 3``, ``Final score: 5``, ``Rating: 4``, ``{"score": 2}`` and
``\\boxed{4}``. The last statement in the reply wins. A bare number in prose is never a score.
The statement must hold one integer 0-5 (``4.0`` counts as 4; ``3.5`` does not), optionally
``/5`` or ``out of 5``; otherwise the score is None and ``reason`` says why. Nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agent import bounded_json
from agent.agreement import RUBRIC
from agent.inspection_tasks import SPECVI_BENCH_CODES
from agent.trajectory import ImageRef, Trajectory

SCORE_RANGE = (min(RUBRIC), max(RUBRIC))

_RUBRIC_LINES = "\n".join(f"{score}: {definition}" for score, definition in RUBRIC.items())

JUDGE_RUBRIC_PROMPT = f"""\
You are an expert astronomer grading how well an AI agent reasoned about one astronomical \
1-D spectrum.

The agent was asked a yes/no classification question about the spectrum. It saw a plot of the \
full spectrum, could call `spectral_visualization_tool` to zoom into wavelength windows (each \
call returns a new plot, shown to you where the tool response is), and had to end with \
`<answer>\\boxed{{YES}}` or `\\boxed{{NO}}` followed by a justification. You will read the task \
question and the whole trajectory: the agent's reasoning, its tool calls, the tool observations \
and plots, and its final answer.

Rate the reasoning for coherence and physical consistency on this scale:
{_RUBRIC_LINES}

How to judge:
- Check each claim against the plots: are the features the agent describes (emission or \
absorption lines, molecular bands, continuum shape) really there, at the wavelengths it states?
- Check the physics: line identifications and rest wavelengths, a consistent redshift, and a \
conclusion that follows from the evidence.
- Judge the explanation, not its length or confidence. A right YES/NO reached through wrong \
reasoning is not a high score. A trajectory that ends without an answer is judged on what it \
wrote, and the missing conclusion counts as an error.
- You are not told which system produced the trajectory; do not guess.

Reply with a short justification, then a final line of exactly this form:
Score: N
where N is one integer from 0 to 5. Write nothing after that line."""

_END_NOTES = {
    "tool_limit": "it spent its tool-call budget without answering",
    "max_turns": "it ran out of turns without answering",
    "policy_error": "the model failed to produce a reply",
    "context_limit": "the conversation grew past the model's context",
    "cancelled": "the run was stopped",
}


@dataclass(frozen=True)
class JudgeScore:
    """A parsed judge reply: ``reason`` is the justification when ``score`` is set, and says
    why there is no score when ``score`` is None."""

    score: int | None
    reason: str
    raw: str


# --- messages ----------------------------------------------------------------------------------


def build_judge_messages(
    trajectory: Trajectory, task: Any, *, include_images: bool = True
) -> list[dict[str, Any]]:
    """System = the rubric; user = the task question and the trajectory, images interleaved.

    ``task`` is an ``agent.inspection_tasks.Task`` (its ``code``, ``question`` and ``guideline`` are read)
    and must be the trajectory's task. Without images each plot becomes a one-line note of the
    range it showed, so the judge still knows a plot was there.
    """
    _check_task(trajectory, task)
    if not trajectory.steps:
        raise ValueError(f"trajectory {trajectory.id} has no steps to judge")
    parts: list[dict[str, Any]] = []
    _add_text(parts, f"## Task question\n{task.question.strip()}\n\n")
    if task.guideline.strip():
        _add_text(parts, f"## Expert guideline given to the agent\n{task.guideline.strip()}\n\n")
    _add_text(parts, "## Trajectory\n### Full spectrum shown to the agent\n")
    _add_image(parts, trajectory.initial_image, include_images)
    for number, step in enumerate(trajectory.steps, start=1):
        _add_text(parts, f"\n\n### Agent turn {number}\n{step.assistant_text}")
        if step.tool_result is not None:
            _add_text(parts, f"\n\n### Tool response {number}\n")
            if step.tool_result.image is not None:
                _add_image(parts, step.tool_result.image, include_images)
                _add_text(parts, "\n")
            _add_text(parts, step.tool_result.text)
    _add_text(parts, f"\n\n{_ending(trajectory)}")
    return [
        {"role": "system", "content": [{"type": "text", "text": JUDGE_RUBRIC_PROMPT}]},
        {"role": "user", "content": parts},
    ]


def _check_task(trajectory: Trajectory, task: Any) -> None:
    for attribute in ("code", "question", "guideline"):
        if not isinstance(getattr(task, attribute, None), str):
            raise ValueError(f"task must be an agent.inspection_tasks.Task; got {task!r}")
    if _canonical_code(task.code) != _canonical_code(trajectory.task):
        raise ValueError(
            f"task {task.code!r} does not match the trajectory's task {trajectory.task!r}"
        )


def _canonical_code(code: str) -> str:
    key = code.strip()
    return SPECVI_BENCH_CODES.get(key.lower(), key.upper())


def _add_text(parts: list[dict[str, Any]], text: str) -> None:
    """Append text, merged into the previous part when that is text too."""
    if parts and parts[-1]["type"] == "text":
        parts[-1] = {"type": "text", "text": parts[-1]["text"] + text}
    else:
        parts.append({"type": "text", "text": text})


def _add_image(parts: list[dict[str, Any]], image: ImageRef, include_images: bool) -> None:
    if include_images:
        parts.append({"type": "image", "png": image.png})
        return
    shown = "plot not shown"
    if image.wavelength_range is not None:
        low, high = image.wavelength_range
        shown += f": {low:g}-{high:g} Angstrom"
    if image.label:
        shown += f", label {image.label!r}"
    _add_text(parts, f"[{shown}]")


def _ending(trajectory: Trajectory) -> str:
    note = _END_NOTES.get(trajectory.stop_reason or "")
    if note is None:
        return "Rate this trajectory with the rubric; end with the line `Score: N`."
    return (
        f"The trajectory ended without a final answer: {note}. "
        "Rate this trajectory with the rubric; end with the line `Score: N`."
    )


# --- score parsing -----------------------------------------------------------------------------

_VALUE = r"(?P<value>[-+]?[0-9]+(?:\.[0-9]+)?)"
_SCALE = r"(?:[*_ \t]*(?:/|out[ \t]+of)[ \t]*(?P<scale>[0-9]+(?:\.[0-9]+)?))?"
_SECOND = r"(?P<second>[*_ \t]*(?:-|\u2013|\u2014|to|or|and|,|/)[ \t]*[-+]?[0-9])?"
_LABELLED = re.compile(
    r"(?<!\w)(?:(?:final|overall)[ \t_-]*)?(?:score|rating)(?!\w)"
    r"(?:[ \t]*\([^()\n]{0,20}\))?"  # "Score (0-5): 4"
    r"[\"'*_` \t]*[:=][\s\"'*_`$\[(]*"
    r"(?:\\(?:boxed|textbf|mathbf)[ \t]*\{[ \t]*)?" + _VALUE + _SCALE + _SECOND,
    re.IGNORECASE,
)
_BOXED = re.compile(
    r"\\boxed[ \t]*\{[ \t]*(?:\\text(?:bf)?[ \t]*\{[ \t]*)?" + _VALUE + _SCALE + _SECOND
)
_JSON_REASON_KEYS = ("reason", "justification", "explanation", "rationale")
_SNIPPET_CHARS = 40
_NO_SCORE = "no score statement found (expected a final line 'Score: N' with N in 0-5)"


def parse_judge_score(text: str) -> JudgeScore:
    """The score of a judge reply from its last explicit score statement (see module doc)."""
    if not isinstance(text, str):
        raise TypeError(f"judge reply must be a str; got {type(text).__name__}")
    statements = [*_LABELLED.finditer(text), *_BOXED.finditer(text)]
    if not statements:
        return JudgeScore(None, _NO_SCORE, text)
    last = max(statements, key=lambda match: match.start())
    score, problem = _statement_score(last)
    if score is None:
        return JudgeScore(None, f"{problem} in {_snippet(last.group(0))!r}", text)
    return JudgeScore(score, _justification(text, last), text)


def _statement_score(statement: re.Match[str]) -> tuple[int | None, str]:
    if statement.group("second"):
        return None, "two different scores"
    scale = statement.group("scale")
    if scale is not None and _integer(scale) != SCORE_RANGE[1]:
        return None, f"a score out of {scale}, not the 0-5 rubric"
    value = _integer(statement.group("value"))
    if value is None:
        return None, "not an integer 0-5"
    if not SCORE_RANGE[0] <= value <= SCORE_RANGE[1]:
        return None, "a score outside 0-5"
    return value, ""


def _integer(number: str) -> int | None:
    """The integer a matched number stands for ("4.0" -> 4), or None when it has a fraction."""
    whole, _, fraction = number.partition(".")
    if fraction.strip("0"):
        return None
    sign = -1 if whole.startswith("-") else 1
    digits = whole.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 3:  # far outside 0-5; also keeps int() away from huge digit strings
        return sign * 1000
    return sign * int(digits)


def _snippet(statement: str) -> str:
    cleaned = statement.strip()
    return cleaned if len(cleaned) <= _SNIPPET_CHARS else cleaned[:_SNIPPET_CHARS] + "..."


def _justification(text: str, statement: re.Match[str]) -> str:
    """The judge's reasoning: a JSON reply's reason field, else the text around the score line."""
    from_json = _json_reason(text)
    if from_json is not None:
        return from_json
    line_start = text.rfind("\n", 0, statement.start()) + 1
    line_end = text.find("\n", statement.end())
    before = text[:line_start].strip()
    if before:
        return before
    return "" if line_end == -1 else text[line_end:].strip()


def _json_reason(text: str) -> str | None:
    stripped = text.strip()
    if len(stripped) >= 6 and stripped.startswith("```") and stripped.endswith("```"):
        stripped = stripped[3:-3].strip()
        if stripped[:4].lower() == "json":
            stripped = stripped[4:].strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = bounded_json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    for key in _JSON_REASON_KEYS:
        if isinstance(data.get(key), str):
            return data[key].strip()
    return None
