"""One parser for assistant turns, shared by the rollout loop, evaluation and the GRPO reward.

A turn is one assistant message. The Spec-o3 format (paper Table 6, rules 1-3) is
``<think>...</think>`` followed by either one ``<tool_call>{json}</tool_call>`` or a final
``<answer>\\boxed{YES|NO} justification</answer>``.

Rules decided here, once, so the loop, the evaluator and the reward never disagree:

- A turn's ``errors`` list every format problem. ``format_ok`` (f_fmt of paper eq. 3) is True
  only when no turn has an error and the trajectory-level rules hold (see ``format_ok``).
- ``<think>...</think>`` must open every turn; no text outside tags (whitespace is fine);
  tags are never nested; every tag is closed; at most one ``<tool_call>`` and one ``<answer>``.
- Recovery versus format: a few problems are repaired so the episode can go on, and each repair
  is still an error, so the turn fails f_fmt. Repaired: trailing commas in the call JSON, a
  markdown code fence around it, an unclosed last tag (a stop string that ate ``</tool_call>``),
  a second ``<tool_call>`` (only the first runs), unknown argument keys (ignored), a range given
  max-before-min or empty (passed on as given; the tool swaps or refuses it).
- Accepted as valid, not errors: ``"parameters"`` as an alias of ``"arguments"``, arguments
  given as a JSON string (OpenAI style), ``wavelength_min``/``wavelength_max`` instead of
  ``wavelength_range``, numbers written as numeric strings, ``\\boxed{ yes }`` in any case,
  an empty justification.
- Never recovered (kind "invalid", nothing runs): JSON that stays invalid after the repairs
  (including NaN/Infinity, which are not JSON), a call to any tool other than
  ``spectral_visualization_tool``, missing or non-numeric wavelengths.
- A turn holding both a tool call and an answer is an "answer" turn: the answer ends the
  episode and the call never runs.
- Chat-template control tokens (``<|im_end|>``, ``<|endoftext|>``, ``<|vision_start|>``, ...) are
  never part of a turn: ``strip_special_tokens`` removes them before parsing (and the policies
  remove them before a turn is stored), so a served model that returns its end-of-turn token
  does not fail every format check.

All scanning is linear in the text length (one tag regex without nested quantifiers, a brace
counter for ``\\boxed{}``, and call bodies capped at ``MAX_TOOL_CALL_CHARS``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import bounded_json

TOOL_NAME = "spectral_visualization_tool"
DEFAULT_MAX_TOOL_CALLS = 8  # paper Algorithm 1
MAX_TOOL_CALL_CHARS = 10_000
MAX_ERRORS_PER_TURN = 20  # a garbage turn can hold thousands; the rest are counted, not listed
PREDICTIONS = ("YES", "NO")
TOOL_ARGUMENT_KEYS = ("wavelength_range", "wavelength_min", "wavelength_max", "label")
TOOL_CALL_KEYS = ("name", "arguments", "parameters")

_TAG_ORDER = ("think", "tool_call", "answer")

TurnKind = Literal["tool_call", "answer", "text", "invalid"]

_TAG = re.compile(r"<(/?)(think|tool_call|answer)>")
# Qwen's control tokens all look like <|name|>; a model never writes one as text.
_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")
_BRACE = re.compile(r"[{}]")
_BOXED = "\\boxed{"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# A JSON string literal, or a comma followed only by whitespace and a closing bracket. The two
# alternatives inside the string literal are disjoint, so matching stays linear per start.
_STRING_OR_TRAILING_COMMA = re.compile(r'("(?:[^"\\]|\\.)*")|,(\s*[}\]])', re.DOTALL)
_SNIPPET_CHARS = 40
_COUNT_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class ToolCall:
    """A decoded call. ``executable`` tells whether the loop can run it."""

    name: str
    arguments: dict[str, Any]  # decoded arguments as given (a JSON-string form is decoded)
    raw: str  # the text between <tool_call> and </tool_call>, stripped
    wavelength_range: tuple[float, float] | None  # as given: (first, second), not reordered
    label: str | None = None

    @property
    def executable(self) -> bool:
        return self.name == TOOL_NAME and self.wavelength_range is not None


@dataclass(frozen=True)
class Answer:
    prediction: str | None  # "YES", "NO", or None when the box is missing, invalid or ambiguous
    justification: str  # the answer text without the box, stripped
    raw: str  # the text between <answer> and </answer>


@dataclass(frozen=True)
class ParsedTurn:
    think: str | None
    tool_call: ToolCall | None
    answer: Answer | None
    errors: list[str] = field(default_factory=list)
    kind: TurnKind = "text"

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class FormatCheck:
    ok: bool
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Block:
    tag: str  # "think" | "tool_call" | "answer" | "text"
    content: str
    closed: bool = True


# --- one turn --------------------------------------------------------------------------------


def strip_special_tokens(text: str) -> str:
    """``text`` without chat-template control tokens such as ``<|im_end|>``.

    >>> strip_special_tokens("<think>done</think><answer>NO</answer><|im_end|> <|endoftext|>")
    '<think>done</think><answer>NO</answer>'
    """
    if "<|" not in text:
        return text
    return _SPECIAL_TOKEN.sub("", text).rstrip()


def parse_turn(text: str) -> ParsedTurn:
    """Parse one assistant turn. Never raises on any string; problems go to ``errors``."""
    if not isinstance(text, str):
        raise TypeError(f"parse_turn expects the assistant text as str, got {type(text).__name__}")
    text = strip_special_tokens(text)
    if not text.strip():
        return ParsedTurn(None, None, None, ["empty turn: no <think>, <tool_call> or <answer>"])
    blocks, errors = _scan_blocks(text)
    errors.extend(_structure_errors(blocks))

    thinks = [block for block in blocks if block.tag == "think"]
    calls = [block for block in blocks if block.tag == "tool_call"]
    answers = [block for block in blocks if block.tag == "answer"]

    tool_call = None
    if calls:
        tool_call, call_errors = parse_tool_call(calls[0].content)
        errors.extend(call_errors)
    answer = None
    if answers:
        answer, answer_errors = _parse_answers([block.content for block in answers])
        errors.extend(answer_errors)

    if answer is not None:
        kind: TurnKind = "answer"
    elif calls:
        kind = "tool_call" if tool_call is not None and tool_call.executable else "invalid"
    else:
        kind = "text"
    think = thinks[0].content.strip() if thinks else None
    return ParsedTurn(think, tool_call, answer, _capped(errors), kind)


def _capped(errors: list[str]) -> list[str]:
    if len(errors) <= MAX_ERRORS_PER_TURN:
        return errors
    hidden = len(errors) - (MAX_ERRORS_PER_TURN - 1)
    return [*errors[: MAX_ERRORS_PER_TURN - 1], f"... and {hidden} more problems in this turn"]


def _scan_blocks(text: str) -> tuple[list[_Block], list[str]]:
    """Split a turn into tag blocks and the non-blank text between them, in order."""
    blocks: list[_Block] = []
    errors: list[str] = []
    text_start = 0
    open_tag: str | None = None
    content_start = 0
    for match in _TAG.finditer(text):
        closing, name = match.group(1) == "/", match.group(2)
        if open_tag is None:
            _append_text(blocks, text[text_start : match.start()])
            text_start = match.end()
            if closing:
                errors.append(f"</{name}> without an opening <{name}>")
            else:
                open_tag, content_start = name, match.end()
        elif closing and name == open_tag:
            blocks.append(_Block(open_tag, text[content_start : match.start()]))
            open_tag, text_start = None, match.end()
        elif closing:
            errors.append(f"</{name}> inside <{open_tag}>; close <{open_tag}> first")
        else:
            errors.append(f"<{name}> inside <{open_tag}>; tags cannot be nested")
    if open_tag is not None:
        errors.append(f"unclosed <{open_tag}> tag")
        blocks.append(_Block(open_tag, text[content_start:], closed=False))
    else:
        _append_text(blocks, text[text_start:])
    return blocks, errors


def _append_text(blocks: list[_Block], segment: str) -> None:
    if segment.strip():
        blocks.append(_Block("text", segment.strip()))


def _structure_errors(blocks: list[_Block]) -> list[str]:
    errors: list[str] = []
    tagged = [block for block in blocks if block.tag != "text"]
    previous_tag: str | None = None
    for block in blocks:
        if block.tag != "text":
            previous_tag = block.tag
        elif previous_tag is not None:
            errors.append(f"text after </{previous_tag}>: {_snippet(block.content)}")
        elif tagged:
            errors.append(f"text before <{tagged[0].tag}>: {_snippet(block.content)}")
        else:
            errors.append(f"text outside any tag: {_snippet(block.content)}")

    counts = {tag: sum(1 for block in tagged if block.tag == tag) for tag in _TAG_ORDER}
    if counts["think"] == 0:
        errors.append("missing <think>...</think>; every turn starts with its reasoning")
    elif tagged[0].tag != "think":
        errors.append(f"<{tagged[0].tag}> before <think>; <think>...</think> must come first")
    if counts["think"] > 1:
        errors.append(f"{_count(counts['think'])} <think> blocks in one turn; reason in one block")
    if counts["tool_call"] > 1:
        errors.append(
            f"{_count(counts['tool_call'])} <tool_call> blocks in one turn; "
            "only one call per turn is allowed"
        )
    if counts["answer"] > 1:
        errors.append(f"{_count(counts['answer'])} <answer> blocks in one turn; answer once")
    if counts["tool_call"] and counts["answer"]:
        errors.append(
            "<tool_call> and <answer> in the same turn; answer only after the last tool response"
        )
    if not counts["tool_call"] and not counts["answer"]:
        errors.append("no <tool_call> or <answer> in this turn")
    return errors


def _count(number: int) -> str:
    return _COUNT_WORDS.get(number, str(number))


def _snippet(text: str) -> str:
    short = text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "..."
    return repr(short)


# --- tool calls ------------------------------------------------------------------------------


def parse_tool_call(body: str) -> tuple[ToolCall | None, list[str]]:
    """Decode the text between ``<tool_call>`` tags. None when no name could be read."""
    raw = body.strip()
    if not raw:
        return None, ["empty <tool_call> block"]
    if len(raw) > MAX_TOOL_CALL_CHARS:
        return None, [
            f"tool_call body is {len(raw)} characters; a call is one short JSON object "
            f"(at most {MAX_TOOL_CALL_CHARS})"
        ]
    payload, errors = _decode_call_json(raw)
    if payload is None:
        return None, errors
    if not isinstance(payload, dict):
        errors.append(
            'tool_call JSON must be an object {"name": ..., "arguments": {...}}; '
            f"got {type(payload).__name__}"
        )
        return None, errors
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append('tool_call JSON has no "name" string')
        return None, errors
    name = name.strip()
    errors.extend(
        f"unknown key {key!r} in tool_call; expected {', '.join(TOOL_CALL_KEYS[:2])}"
        for key in payload
        if key not in TOOL_CALL_KEYS
    )
    if name != TOOL_NAME:
        errors.append(f"unknown tool {name!r}; the only tool is {TOOL_NAME}")
    arguments, argument_errors = _call_arguments(payload)
    errors.extend(argument_errors)
    wavelength_range, label = None, None
    if arguments is not None:
        wavelength_range, label, normalize_errors = _normalize_arguments(arguments)
        errors.extend(normalize_errors)
    return ToolCall(name, arguments or {}, raw, wavelength_range, label), errors


def _decode_call_json(raw: str) -> tuple[Any, list[str]]:
    errors: list[str] = []
    text = raw
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        text = text[3:-3].removeprefix("json").strip()
        errors.append("tool_call JSON is wrapped in a markdown code fence (the call runs anyway)")
    try:
        return _strict_json(text), errors
    except (ValueError, RecursionError) as error:
        first_error = error
    repaired = _STRING_OR_TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)
    if repaired != text:
        try:
            value = _strict_json(repaired)
        except (ValueError, RecursionError):
            pass
        else:
            errors.append("tool_call JSON has trailing commas (the call runs anyway)")
            return value, errors
    errors.append(f"tool_call JSON is invalid: {first_error}")
    return None, errors


def _strict_json(text: str) -> Any:
    return bounded_json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _call_arguments(payload: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    has_arguments, has_parameters = "arguments" in payload, "parameters" in payload
    if has_arguments and has_parameters:
        return None, ['tool_call has both "arguments" and "parameters"; give one "arguments"']
    if not has_arguments and not has_parameters:
        return None, ['tool_call has no "arguments"']
    arguments = payload["arguments" if has_arguments else "parameters"]
    if isinstance(arguments, str):
        try:
            arguments = _strict_json(arguments)
        except (ValueError, RecursionError) as error:
            return None, [f"tool_call arguments string is not valid JSON: {error}"]
    if not isinstance(arguments, dict):
        return None, [f"tool_call arguments must be an object; got {type(arguments).__name__}"]
    return arguments, []


def _normalize_arguments(
    arguments: dict[str, Any],
) -> tuple[tuple[float, float] | None, str | None, list[str]]:
    errors = [
        f"unknown argument {key!r}; {TOOL_NAME} takes wavelength_range [min, max] and label"
        for key in arguments
        if key not in TOOL_ARGUMENT_KEYS
    ]
    bounds = _wavelength_bounds(arguments, errors)
    wavelength_range = None
    if bounds is not None:
        low, high = bounds
        wavelength_range = (low, high)
        if not low < high:
            errors.append(f"wavelength_range [{low:g}, {high:g}] must have min < max")
    return wavelength_range, _label(arguments.get("label"), errors), errors


def _wavelength_bounds(arguments: dict[str, Any], errors: list[str]) -> tuple[float, float] | None:
    has_range = "wavelength_range" in arguments
    has_min, has_max = "wavelength_min" in arguments, "wavelength_max" in arguments
    if has_range and (has_min or has_max):
        errors.append("give either wavelength_range or wavelength_min/wavelength_max, not both")
        return None
    if has_range:
        value = arguments["wavelength_range"]
        if not isinstance(value, list) or len(value) != 2:
            errors.append(f"wavelength_range must be [min, max]; got {_short_json(value)}")
            return None
        low = _number(value[0], "wavelength_range[0]", errors)
        high = _number(value[1], "wavelength_range[1]", errors)
    elif has_min and has_max:
        low = _number(arguments["wavelength_min"], "wavelength_min", errors)
        high = _number(arguments["wavelength_max"], "wavelength_max", errors)
    elif has_min or has_max:
        given, missing = (
            ("wavelength_min", "wavelength_max")
            if has_min
            else ("wavelength_max", "wavelength_min")
        )
        errors.append(f"{given} given without {missing}")
        return None
    else:
        errors.append("tool_call arguments have no wavelength_range [min, max]")
        return None
    if low is None or high is None:
        return None
    return low, high


def _number(value: Any, what: str, errors: list[str]) -> float | None:
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        number = float(value.strip())
    if number is None:
        errors.append(f"{what} must be a number in Angstrom; got {_short_json(value)}")
        return None
    if not math.isfinite(number):
        errors.append(f"{what} must be finite; got {_short_json(value)}")
        return None
    return number


def _label(value: Any, errors: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        errors.append(f"label must be a string; got {_short_json(value)}")
        return None
    return value.strip() or None


def _short_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "..."


# --- answers ---------------------------------------------------------------------------------


def _parse_answers(contents: list[str]) -> tuple[Answer, list[str]]:
    """The first answer block; its prediction is dropped when later blocks disagree."""
    first, errors = parse_answer(contents[0])
    others = [parse_answer(content)[0].prediction for content in contents[1:]]
    if first.prediction is not None and any(other != first.prediction for other in others):
        errors.append("the <answer> blocks disagree; the decision is ambiguous")
        first = Answer(None, first.justification, first.raw)
    return first, errors


def parse_answer(content: str) -> tuple[Answer, list[str]]:
    """Read ``\\boxed{YES|NO}`` and the justification from the text inside ``<answer>``."""
    values, outside, errors = _boxes(content)
    justification = "".join(outside).strip()
    if not values:
        errors.append("<answer> has no \\boxed{YES} or \\boxed{NO}")
        return Answer(None, justification, content), errors
    decisions = []
    for value in values:
        decision = value.strip().upper()
        if decision in PREDICTIONS:
            decisions.append(decision)
        else:
            errors.append(f"\\boxed{{{_short(value)}}} is not YES or NO")
    distinct = sorted(set(decisions))
    if len(distinct) > 1:
        errors.append("<answer> has both \\boxed{YES} and \\boxed{NO}; give one decision")
    valid = len(distinct) == 1 and len(decisions) == len(values)
    return Answer(distinct[0] if valid else None, justification, content), errors


def _boxes(content: str) -> tuple[list[str], list[str], list[str]]:
    """Contents of each top-level ``\\boxed{...}`` and the text around them, in one pass."""
    values: list[str] = []
    outside: list[str] = []
    errors: list[str] = []
    position = 0
    while True:
        start = content.find(_BOXED, position)
        if start < 0:
            outside.append(content[position:])
            break
        outside.append(content[position:start])
        value_start = start + len(_BOXED)
        close = _matching_brace(content, value_start)
        if close is None:
            errors.append("unclosed \\boxed{ in <answer>")
            outside.append(content[start:])
            break
        values.append(content[value_start:close])
        position = close + 1
    return values, outside, errors


def _matching_brace(text: str, start: int) -> int | None:
    depth = 1
    for match in _BRACE.finditer(text, start):
        depth += 1 if match.group() == "{" else -1
        if depth == 0:
            return match.start()
    return None


def _short(text: str) -> str:
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "..."


# --- whole trajectories ----------------------------------------------------------------------


def format_ok(
    turns: Sequence[str], *, max_tool_calls: int | None = DEFAULT_MAX_TOOL_CALLS
) -> FormatCheck:
    """f_fmt of paper eq. 3 for a whole trajectory (the assistant turn texts, in order).

    True when every turn parses without error (think first, at most one call, balanced tags,
    nothing outside tags), every turn but the last is a tool call, the last turn is the only
    answer and carries a valid ``\\boxed{YES|NO}``, and there are at most ``max_tool_calls``
    tool-call turns (None: no limit).
    """
    if isinstance(turns, str):
        raise TypeError("format_ok takes the list of assistant turn texts, not one string")
    if not turns:
        return FormatCheck(False, ["no assistant turns"])
    parsed = [parse_turn(turn) for turn in turns]
    reasons = [
        f"turn {number}: {error}" for number, turn in enumerate(parsed, 1) for error in turn.errors
    ]
    last = len(parsed)
    reasons.extend(
        f"turn {number}: <answer> before the last turn; the answer ends the trajectory"
        for number, turn in enumerate(parsed, 1)
        if turn.answer is not None and number != last
    )
    if parsed[-1].answer is None:
        reasons.append(f"the trajectory does not end with an <answer> (turn {last} has none)")
    n_calls = sum(1 for turn in parsed if turn.kind in ("tool_call", "invalid"))
    if max_tool_calls is not None and n_calls > max_tool_calls:
        reasons.append(f"{n_calls} tool calls; at most {max_tool_calls} are allowed")
    return FormatCheck(not reasons, reasons)


def extract_prediction(
    text_or_turns: str | Sequence[str], *, require_answer_tag: bool = True
) -> str | None:
    """The final decision "YES"/"NO" by the paper's exact-match rule, or None.

    The decision must be ``\\boxed{YES}`` or ``\\boxed{NO}`` inside ``<answer>``. Given several
    turns, every answer found must agree, else the result is None (ambiguous counts as wrong).
    With ``require_answer_tag=False`` (zero-shot baselines that skip the tags) a text without
    any ``<answer>`` falls back to its ``\\boxed{}`` values, which must agree.
    """
    turns = [text_or_turns] if isinstance(text_or_turns, str) else list(text_or_turns)
    answers = [parsed.answer for parsed in map(parse_turn, turns) if parsed.answer is not None]
    if answers:
        predictions = {answer.prediction for answer in answers}
        return predictions.pop() if len(predictions) == 1 else None
    if require_answer_tag:
        return None
    fallback = {parse_answer(turn)[0].prediction for turn in turns if _BOXED in turn}
    return fallback.pop() if len(fallback) == 1 else None
