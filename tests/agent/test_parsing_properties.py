"""Property tests of the turn parser: it never raises, and well-formed turns parse back exactly."""

from __future__ import annotations

import json

from hypothesis import assume, given
from hypothesis import strategies as st

from agent.parsing import TOOL_NAME, extract_prediction, format_ok, parse_turn

FRAGMENTS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "\\boxed{",
    "{",
    "}",
    "[",
    "]",
    '"',
    ",",
    ":",
    "YES",
    "no",
    f'"name": "{TOOL_NAME}"',
    '"arguments"',
    '"wavelength_range"',
    "NaN",
    "1e999",
    "```",
    "\n",
]

tagged_noise = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)
# Free text that cannot open or close a tag: the format forbids tags inside blocks.
plain_text = st.text(alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)))
finite = st.floats(allow_nan=False, allow_infinity=False)


@given(st.text() | tagged_noise)
def test_it_never_raises_on_any_text(text: str) -> None:
    parsed = parse_turn(text)
    assert parsed.kind in ("tool_call", "answer", "text", "invalid")
    assert all(isinstance(error, str) and error for error in parsed.errors)


@given(st.lists(st.text() | tagged_noise, max_size=4))
def test_it_never_raises_on_any_trajectory(turns: list[str]) -> None:
    check = format_ok(turns)
    assert check.ok == (not check.reasons)
    extract_prediction(turns)


def _arguments(form: str, low: float, high: float, label: str | None) -> dict | str:
    if form == "range":
        arguments: dict = {"wavelength_range": [low, high]}
    elif form == "min_max":
        arguments = {"wavelength_min": low, "wavelength_max": high}
    else:  # numeric strings; repr() round-trips every float exactly
        arguments = {"wavelength_range": [repr(low), repr(high)]}
    if label is not None:
        arguments["label"] = label
    return arguments


@given(
    think=plain_text,
    bounds=st.tuples(finite, finite).map(sorted),
    label=st.none() | plain_text,
    form=st.sampled_from(["range", "min_max", "strings"]),
    key=st.sampled_from(["arguments", "parameters"]),
    as_string=st.booleans(),
    spacing=st.sampled_from(["", "\n", " \n  "]),
)
def test_it_parses_a_generated_call_back_to_its_values(
    think: str,
    bounds: list[float],
    label: str | None,
    form: str,
    key: str,
    as_string: bool,
    spacing: str,
) -> None:
    low, high = bounds
    assume(low < high)
    arguments = _arguments(form, low, high, label)
    payload = {"name": TOOL_NAME, key: json.dumps(arguments) if as_string else arguments}
    text = (
        f"<think>{think}</think>{spacing}<tool_call>{spacing}{json.dumps(payload)}"
        f"{spacing}</tool_call>{spacing}"
    )
    parsed = parse_turn(text)
    assert parsed.errors == []
    assert parsed.kind == "tool_call"
    assert parsed.think == think.strip()
    assert parsed.tool_call is not None
    assert parsed.tool_call.wavelength_range == (low, high)
    assert parsed.tool_call.label == ((label or "").strip() or None)


@given(
    think=plain_text,
    decision=st.sampled_from(["YES", "NO"]),
    casing=st.sampled_from([str.upper, str.lower, str.title]),
    padding=st.sampled_from(["", " ", "\n "]),
    justification=plain_text.filter(lambda text: "\\boxed{" not in text),
)
def test_it_parses_a_generated_answer_back_to_its_values(
    think: str, decision: str, casing, padding: str, justification: str
) -> None:
    text = (
        f"<think>{think}</think>\n<answer>\\boxed{{{padding}{casing(decision)}{padding}}}"
        f"{justification}</answer>"
    )
    parsed = parse_turn(text)
    assert parsed.errors == []
    assert parsed.kind == "answer"
    assert parsed.answer is not None
    assert parsed.answer.prediction == decision
    assert parsed.answer.justification == justification.strip()
    assert extract_prediction(text) == decision


# --- malformed around well-formed turns: always caught, never silently accepted ------------------

CALL_TURN = (
    "<think>Zoom on H-alpha.</think><tool_call>"
    + json.dumps({"name": TOOL_NAME, "arguments": {"wavelength_range": [6500, 6650]}})
    + "</tool_call>"
)
ANSWER_TURN = "<think>Broad lines.</think><answer>\\boxed{YES} Broad Balmer lines.</answer>"
stray_text = plain_text.filter(lambda text: text.strip() != "")


@given(prefix=stray_text, turn=st.sampled_from([CALL_TURN, ANSWER_TURN]))
def test_it_names_stray_text_before_a_turn(prefix: str, turn: str) -> None:
    parsed = parse_turn(prefix + turn)
    assert any(error.startswith("text before <think>") for error in parsed.errors)


@given(suffix=stray_text, turn=st.sampled_from([CALL_TURN, ANSWER_TURN]))
def test_it_names_stray_text_after_a_turn(suffix: str, turn: str) -> None:
    closing = "</tool_call>" if turn == CALL_TURN else "</answer>"
    parsed = parse_turn(turn + suffix)
    assert any(error.startswith(f"text after {closing}") for error in parsed.errors)


@given(cut=st.integers(min_value=1, max_value=len(CALL_TURN) - 1))
def test_it_never_accepts_a_call_cut_short(cut: int) -> None:
    """A turn cut off mid-way (the token limit) is an error, never a call with other values."""
    parsed = parse_turn(CALL_TURN[:cut])
    assert parsed.errors
    assert parsed.kind != "tool_call" or parsed.tool_call.wavelength_range == (6500.0, 6650.0)


@given(calls=st.integers(min_value=0, max_value=12), limit=st.integers(min_value=0, max_value=10))
def test_it_allows_a_trajectory_exactly_up_to_the_call_limit(calls: int, limit: int) -> None:
    check = format_ok([CALL_TURN] * calls + [ANSWER_TURN], max_tool_calls=limit)
    assert check.ok == (calls <= limit)
    if calls > limit:
        assert f"{calls} tool calls; at most {limit} are allowed" in check.reasons
