"""Table-driven tests of the one assistant-turn parser and the trajectory format check."""

from __future__ import annotations

import json

import pytest

from agent.bench.parse import pathological_turns
from agent.parsing import (
    MAX_ERRORS_PER_TURN,
    TOOL_NAME,
    extract_prediction,
    format_ok,
    parse_turn,
)

CALL = (
    '{"name": "spectral_visualization_tool", '
    '"arguments": {"wavelength_range": [6500, 6650], "label": "H-alpha"}}'
)
THINK = "<think>Balmer lines look broad; zoom on H-alpha.</think>\n"
GOOD_CALL_TURN = f"{THINK}<tool_call>\n{CALL}\n</tool_call>"
GOOD_ANSWER_TURN = (
    "<think>Broad H-alpha and He II 4686.</think>\n<answer>\\boxed{YES} Broad lines.</answer>"
)


def call_turn(payload: str) -> str:
    return f"{THINK}<tool_call>{payload}</tool_call>"


def answer_turn(body: str) -> str:
    return f"<think>Decide.</think><answer>{body}</answer>"


# (case id, text, kind, expected error substring or None when the turn is clean)
TURNS = [
    ("valid call", GOOD_CALL_TURN, "tool_call", None),
    ("valid answer", GOOD_ANSWER_TURN, "answer", None),
    ("empty output", "", "text", "empty turn"),
    ("whitespace only", " \n\t ", "text", "empty turn"),
    ("think only", "<think>hmm</think>", "text", "no <tool_call> or <answer> in this turn"),
    ("unclosed think", "<think>hmm, H-alpha looks", "text", "unclosed <think> tag"),
    (
        "unclosed tool_call runs",
        f"{THINK}<tool_call>{CALL}",
        "tool_call",
        "unclosed <tool_call> tag",
    ),
    (
        "two calls in a turn",
        f"{THINK}<tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call>",
        "tool_call",
        "two <tool_call> blocks in one turn; only one call per turn is allowed",
    ),
    (
        "trailing commas",
        call_turn(
            '{"name": "spectral_visualization_tool", '
            '"arguments": {"wavelength_range": [6500, 6650,], "label": "H-alpha",},}'
        ),
        "tool_call",
        "trailing commas",
    ),
    (
        "markdown fence",
        call_turn(f"```json\n{CALL}\n```"),
        "tool_call",
        "markdown code fence",
    ),
    (
        "unknown tool",
        call_turn('{"name": "zoom", "arguments": {"wavelength_range": [6500, 6650]}}'),
        "invalid",
        "unknown tool 'zoom'; the only tool is spectral_visualization_tool",
    ),
    (
        "NaN is not JSON",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [NaN, 6650]}}'
        ),
        "invalid",
        "NaN is not valid JSON",
    ),
    (
        "JSON array instead of object",
        call_turn("[6500, 6650]"),
        "invalid",
        "tool_call JSON must be an object",
    ),
    ("empty call", call_turn("  "), "invalid", "empty <tool_call> block"),
    (
        "no name",
        call_turn('{"arguments": {"wavelength_range": [6500, 6650]}}'),
        "invalid",
        'no "name"',
    ),
    (
        "no arguments",
        call_turn('{"name": "spectral_visualization_tool"}'),
        "invalid",
        'tool_call has no "arguments"',
    ),
    (
        "arguments and parameters",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [1, 2]}, '
            '"parameters": {"wavelength_range": [1, 2]}}'
        ),
        "invalid",
        'both "arguments" and "parameters"',
    ),
    (
        "no wavelengths",
        call_turn('{"name": "spectral_visualization_tool", "arguments": {"label": "H-alpha"}}'),
        "invalid",
        "no wavelength_range",
    ),
    (
        "three numbers",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [1, 2, 3]}}'
        ),
        "invalid",
        "wavelength_range must be [min, max]",
    ),
    (
        "non-numeric string",
        call_turn(
            '{"name": "spectral_visualization_tool", '
            '"arguments": {"wavelength_range": ["6500 A", 6650]}}'
        ),
        "invalid",
        "wavelength_range[0] must be a number",
    ),
    (
        "boolean is not a number",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [true, 6650]}}'
        ),
        "invalid",
        "wavelength_range[0] must be a number",
    ),
    (
        "overflowing number",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [1, 1e999]}}'
        ),
        "invalid",
        "wavelength_range[1] must be finite",
    ),
    (
        "min without max",
        call_turn('{"name": "spectral_visualization_tool", "arguments": {"wavelength_min": 6500}}'),
        "invalid",
        "wavelength_min given without wavelength_max",
    ),
    (
        "both range forms",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": '
            '{"wavelength_range": [1, 2], "wavelength_min": 1, "wavelength_max": 2}}'
        ),
        "invalid",
        "not both",
    ),
    (
        "max before min runs",
        call_turn(
            '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6650, 6500]}}'
        ),
        "tool_call",
        "wavelength_range [6650, 6500] must have min < max",
    ),
    (
        "unknown argument runs",
        call_turn(
            '{"name": "spectral_visualization_tool", '
            '"arguments": {"wavelength_range": [6500, 6650], "unit": "A"}}'
        ),
        "tool_call",
        "unknown argument 'unit'",
    ),
    (
        "label not a string",
        call_turn(
            '{"name": "spectral_visualization_tool", '
            '"arguments": {"wavelength_range": [6500, 6650], "label": 7}}'
        ),
        "tool_call",
        "label must be a string",
    ),
    (
        "text after the answer",
        GOOD_ANSWER_TURN + " Hope this helps!",
        "answer",
        "text after </answer>: 'Hope this helps!'",
    ),
    (
        "text after the call",
        GOOD_CALL_TURN + "\n<tool_response>made up</tool_response>",
        "tool_call",
        "text after </tool_call>",
    ),
    (
        "text before think",
        "Sure! " + GOOD_ANSWER_TURN,
        "answer",
        "text before <think>: 'Sure!'",
    ),
    (
        "answer without think",
        "<answer>\\boxed{NO} Normal K star.</answer>",
        "answer",
        "missing <think>...</think>",
    ),
    (
        "call before think",
        f"<tool_call>{CALL}</tool_call><think>late</think>",
        "tool_call",
        "<tool_call> before <think>",
    ),
    (
        "two thinks",
        f"<think>a</think><think>b</think><tool_call>{CALL}</tool_call>",
        "tool_call",
        "two <think> blocks in one turn",
    ),
    (
        "answer and call in one turn",
        f"{THINK}<tool_call>{CALL}</tool_call><answer>\\boxed{{YES}}</answer>",
        "answer",
        "<tool_call> and <answer> in the same turn",
    ),
    (
        "maybe in the box",
        answer_turn("\\boxed{maybe} unsure"),
        "answer",
        "\\boxed{maybe} is not YES or NO",
    ),
    (
        "missing box",
        answer_turn("YES, it is a CV."),
        "answer",
        "has no \\boxed{YES} or \\boxed{NO}",
    ),
    ("unclosed box", answer_turn("\\boxed{YES because"), "answer", "unclosed \\boxed{"),
    (
        "YES and NO boxes",
        answer_turn("\\boxed{YES} or \\boxed{NO}"),
        "answer",
        "both \\boxed{YES} and \\boxed{NO}",
    ),
    (
        "nested answer",
        "<think>x</think><answer><answer>\\boxed{YES}</answer></answer>",
        "answer",
        "<answer> inside <answer>; tags cannot be nested",
    ),
    (
        "duplicated answer",
        "<think>x</think><answer>\\boxed{YES}</answer><answer>\\boxed{YES}</answer>",
        "answer",
        "two <answer> blocks in one turn",
    ),
    (
        "stray closing tag",
        "<think>x</think></think><answer>\\boxed{NO}</answer>",
        "answer",
        "</think> without an opening <think>",
    ),
]


@pytest.mark.parametrize(
    ("text", "kind", "error"), [case[1:] for case in TURNS], ids=[case[0] for case in TURNS]
)
def test_it_classifies_each_turn_and_names_its_problem(
    text: str, kind: str, error: str | None
) -> None:
    parsed = parse_turn(text)
    assert parsed.kind == kind
    if error is None:
        assert parsed.errors == []
    else:
        assert any(error in message for message in parsed.errors), parsed.errors


def test_it_reads_the_call_arguments_and_think() -> None:
    parsed = parse_turn(GOOD_CALL_TURN)
    assert parsed.think == "Balmer lines look broad; zoom on H-alpha."
    call = parsed.tool_call
    assert call is not None
    assert (call.name, call.wavelength_range, call.label) == (
        TOOL_NAME,
        (6500.0, 6650.0),
        "H-alpha",
    )
    assert call.arguments == {"wavelength_range": [6500, 6650], "label": "H-alpha"}
    assert call.raw == CALL


@pytest.mark.parametrize(
    "arguments",
    [
        {"wavelength_min": 4600, "wavelength_max": 4760.5, "label": "He II"},
        {"wavelength_range": ["4600", " 4760.5 "], "label": "He II"},
        {"wavelength_min": "4.6e3", "wavelength_max": "4760.5", "label": " He II "},
    ],
    ids=["min/max form", "numeric strings", "min/max numeric strings"],
)
def test_it_normalizes_every_accepted_argument_form_without_error(arguments: dict) -> None:
    parsed = parse_turn(call_turn(json.dumps({"name": TOOL_NAME, "arguments": arguments})))
    assert parsed.errors == []
    assert parsed.tool_call is not None
    assert parsed.tool_call.wavelength_range == (4600.0, 4760.5)
    assert parsed.tool_call.label == "He II"


def test_it_accepts_arguments_given_as_a_json_string_under_parameters() -> None:
    inner = json.dumps({"wavelength_range": [3900, 4000]})
    parsed = parse_turn(call_turn(json.dumps({"name": TOOL_NAME, "parameters": inner})))
    assert parsed.kind == "tool_call" and parsed.errors == []
    assert parsed.tool_call is not None and parsed.tool_call.wavelength_range == (3900.0, 4000.0)
    assert parsed.tool_call.arguments == {"wavelength_range": [3900, 4000]}


def test_it_reports_invalid_json_with_the_decoder_position() -> None:
    body = '{"name": "spectral_visualization_tool" "arguments": {}}'
    position = len('{"name": "spectral_visualization_tool" ')  # where the missing comma was due
    parsed = parse_turn(call_turn(body))
    assert parsed.kind == "invalid" and parsed.tool_call is None
    assert parsed.errors == [
        f"tool_call JSON is invalid: Expecting ',' delimiter: line 1 column {position + 1} "
        f"(char {position})"
    ]


def test_it_keeps_a_comma_inside_a_string_when_repairing_trailing_commas() -> None:
    body = (
        '{"name": "spectral_visualization_tool", '
        '"arguments": {"wavelength_range": [6500, 6650], "label": "Ha ,]",},}'
    )
    parsed = parse_turn(call_turn(body))
    assert parsed.tool_call is not None and parsed.tool_call.label == "Ha ,]"


def test_it_runs_only_the_first_of_two_calls() -> None:
    second = CALL.replace("[6500, 6650]", "[4800, 4900]")
    parsed = parse_turn(f"{THINK}<tool_call>{CALL}</tool_call><tool_call>{second}</tool_call>")
    assert parsed.tool_call is not None and parsed.tool_call.wavelength_range == (6500.0, 6650.0)


def test_it_passes_a_reversed_range_on_as_given() -> None:
    body = json.dumps({"name": TOOL_NAME, "arguments": {"wavelength_range": [6650, 6500]}})
    call = parse_turn(call_turn(body)).tool_call
    assert call is not None and call.executable and call.wavelength_range == (6650.0, 6500.0)


@pytest.mark.parametrize(
    ("body", "prediction", "justification"),
    [
        ("\\boxed{YES} Broad Balmer lines.", "YES", "Broad Balmer lines."),
        ("\\boxed{ Yes } broad", "YES", "broad"),
        ("\\boxed{no}", "NO", ""),
        ("Verdict: \\boxed{NO}. A normal K giant.", "NO", "Verdict: . A normal K giant."),
        ("\\boxed{YES} and again \\boxed{yes}", "YES", "and again"),
        ("\\boxed{maybe} unsure", None, "unsure"),
        ("\\boxed{\\text{YES}} styled", None, "styled"),
        ("no box at all", None, "no box at all"),
    ],
)
def test_it_reads_the_box_and_justification(
    body: str, prediction: str | None, justification: str
) -> None:
    answer = parse_turn(answer_turn(body)).answer
    assert answer is not None
    assert (answer.prediction, answer.justification, answer.raw) == (
        prediction,
        justification,
        body,
    )


def test_it_drops_the_prediction_when_two_answers_disagree() -> None:
    parsed = parse_turn("<think>x</think><answer>\\boxed{YES}</answer><answer>\\boxed{NO}</answer>")
    assert parsed.answer is not None and parsed.answer.prediction is None
    assert any("disagree" in error for error in parsed.errors)


def test_it_rejects_non_string_input() -> None:
    with pytest.raises(TypeError, match="parse_turn expects the assistant text as str"):
        parse_turn(None)  # type: ignore[arg-type]


def test_it_caps_the_error_list_of_a_garbage_turn() -> None:
    parsed = parse_turn("</answer>" * 500)
    assert len(parsed.errors) == 20
    assert parsed.errors[-1].startswith("... and ")


PATHOLOGICAL = pathological_turns()


@pytest.mark.parametrize("text", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_it_parses_a_megabyte_of_pathological_text_into_bounded_errors(text: str) -> None:
    # Speed is measured by `python -m agent.bench parse`; here: it finishes and stays bounded.
    parsed = parse_turn(text)
    assert len(parsed.errors) <= MAX_ERRORS_PER_TURN
    assert parsed.tool_call is None or not parsed.tool_call.executable


def test_it_refuses_an_oversized_call_body() -> None:
    parsed = parse_turn("<think>t</think><tool_call>" + " " * 5 + "{" * 20_000 + "</tool_call>")
    assert parsed.kind == "invalid"
    assert parsed.errors == [
        "tool_call body is 20000 characters; a call is one short JSON object (at most 10000)"
    ]


# --- whole trajectories ----------------------------------------------------------------------


def test_it_accepts_a_well_formed_trajectory() -> None:
    check = format_ok([GOOD_CALL_TURN, GOOD_CALL_TURN, GOOD_ANSWER_TURN])
    assert check.ok and check.reasons == []


@pytest.mark.parametrize(
    ("turns", "reason"),
    [
        ([], "no assistant turns"),
        ([GOOD_CALL_TURN], "the trajectory does not end with an <answer> (turn 1 has none)"),
        ([GOOD_ANSWER_TURN, GOOD_ANSWER_TURN], "turn 1: <answer> before the last turn"),
        (
            [GOOD_CALL_TURN, "<answer>\\boxed{YES}</answer>"],
            "turn 2: missing <think>...</think>",
        ),
        (
            [GOOD_CALL_TURN, answer_turn("\\boxed{maybe}")],
            "turn 2: \\boxed{maybe} is not YES or NO",
        ),
        (
            ["<think>only thinking</think>", GOOD_ANSWER_TURN],
            "turn 1: no <tool_call> or <answer> in this turn",
        ),
        (
            [call_turn(CALL.replace("6650]", "6650,]")), GOOD_ANSWER_TURN],
            "turn 1: tool_call JSON has trailing commas",
        ),
        ([GOOD_CALL_TURN] * 9 + [GOOD_ANSWER_TURN], "9 tool calls; at most 8 are allowed"),
    ],
    ids=[
        "no turns",
        "no answer",
        "early answer",
        "answer without think",
        "invalid box",
        "text-only turn",
        "repaired call",
        "too many calls",
    ],
)
def test_it_fails_the_format_and_says_why(turns: list[str], reason: str) -> None:
    check = format_ok(turns)
    assert not check.ok
    assert any(message.startswith(reason) for message in check.reasons), check.reasons


def test_it_lifts_the_call_limit_when_asked() -> None:
    assert format_ok([GOOD_CALL_TURN] * 9 + [GOOD_ANSWER_TURN], max_tool_calls=None).ok


def test_it_refuses_a_single_string_for_a_trajectory() -> None:
    with pytest.raises(TypeError, match="not one string"):
        format_ok(GOOD_ANSWER_TURN)


# --- evaluation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "prediction"),
    [
        (GOOD_ANSWER_TURN, "YES"),
        ([GOOD_CALL_TURN, answer_turn("\\boxed{NO} normal star")], "NO"),
        ([GOOD_CALL_TURN], None),
        (answer_turn("\\boxed{maybe}"), None),
        ([answer_turn("\\boxed{YES}"), answer_turn("\\boxed{NO}")], None),
        ([answer_turn("\\boxed{NO}"), answer_turn("\\boxed{no}")], "NO"),
        ("The answer is \\boxed{YES}.", None),
        ("", None),
    ],
    ids=[
        "one answer turn",
        "last turn answers",
        "no answer",
        "invalid box",
        "answers disagree",
        "answers agree",
        "box without answer tag",
        "empty",
    ],
)
def test_it_extracts_the_exact_match_prediction(
    value: str | list[str], prediction: str | None
) -> None:
    assert extract_prediction(value) == prediction


@pytest.mark.parametrize(
    ("text", "prediction"),
    [
        ("The answer is \\boxed{YES}.", "YES"),
        ("\\boxed{YES} then \\boxed{NO}", None),
        ("no decision", None),
    ],
)
def test_it_falls_back_to_bare_boxes_for_untagged_baselines(
    text: str, prediction: str | None
) -> None:
    assert extract_prediction(text, require_answer_tag=False) == prediction


def test_it_names_the_same_tool_as_the_tool_module() -> None:
    from agent.tool import TOOL_NAME as tool_module_name

    assert tool_module_name == TOOL_NAME


@pytest.mark.parametrize(
    "suffix", ["<|im_end|>", "<|im_end|>\n<|endoftext|>", "<|endoftext|>", " <|im_start|>"]
)
def test_it_never_lets_chat_template_tokens_into_a_parsed_turn(suffix: str) -> None:
    from agent.parsing import strip_special_tokens

    answer = "<think>Broad lines.</think><answer>\\boxed{YES} broad H-alpha.</answer>"
    parsed = parse_turn(answer + suffix)
    assert (parsed.errors, parsed.answer.justification) == ([], "broad H-alpha.")
    assert strip_special_tokens(answer + suffix) == answer
    assert format_ok([answer + suffix]).ok
