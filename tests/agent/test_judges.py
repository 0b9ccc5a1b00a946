"""Tests of the LLM judge: rubric prompt, blinded messages, and the score parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.agreement import RUBRIC
from agent.inspection_tasks import get_task
from agent.judges import JUDGE_RUBRIC_PROMPT, JudgeScore, build_judge_messages, parse_judge_score
from agent.policies.base import validate_messages
from agent.trajectory import Step
from tests.agent.test_trajectory import (
    ANSWER,
    FIRST_CALL,
    HALPHA_PNG,
    I0_PNG,
    MISSING_WINDOW,
    SECOND_CALL,
    SYSTEM,
    make_trajectory,
)

CV = get_task("CV")
BLIND_POLICY = {
    "name": "Spec-o3-7B",
    "model": "Qwen/Qwen2.5-VL-7B-Instruct",
    "checkpoint": "runs/grpo-7b/step-400",
    "sampling": {"temperature": 0.7, "seed": 1234567},
}


def _texts(messages: list[dict]) -> list[str]:
    return [part["text"] for message in messages for part in message["content"] if "text" in part]


def _user_parts(messages: list[dict]) -> list[dict]:
    return messages[1]["content"]


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    return [str(value)]


# --- prompt ------------------------------------------------------------------------------------


def test_it_puts_every_rubric_definition_in_the_judge_prompt() -> None:
    for score, definition in RUBRIC.items():
        assert f"{score}: {definition}" in JUDGE_RUBRIC_PROMPT


def test_it_asks_the_judge_for_a_final_score_line() -> None:
    assert JUDGE_RUBRIC_PROMPT.endswith(
        "Score: N\nwhere N is one integer from 0 to 5. Write nothing after that line."
    )


def test_it_finds_no_score_in_the_prompt_itself() -> None:
    # A judge that only echoes its instructions must not be read as having scored.
    assert parse_judge_score(JUDGE_RUBRIC_PROMPT).score is None


# --- messages ----------------------------------------------------------------------------------


def test_it_builds_messages_in_the_policy_format() -> None:
    messages = build_judge_messages(make_trajectory(), CV)
    validate_messages(messages)
    assert [message["role"] for message in messages] == ["system", "user"]
    assert messages[0]["content"] == [{"type": "text", "text": JUDGE_RUBRIC_PROMPT}]


def test_it_starts_the_user_turn_with_the_task_question() -> None:
    first = _user_parts(build_judge_messages(make_trajectory(), CV))[0]
    assert first["text"].startswith(f"## Task question\n{CV.question}\n")


def test_it_interleaves_each_plot_where_the_agent_saw_it() -> None:
    parts = _user_parts(build_judge_messages(make_trajectory(), CV))
    kinds = [part["type"] for part in parts]
    assert kinds == ["text", "image", "text", "image", "text"]
    assert [parts[1]["png"], parts[3]["png"]] == [I0_PNG, HALPHA_PNG]
    before_halpha, after_halpha = parts[2]["text"], parts[4]["text"]
    assert before_halpha.rstrip().endswith("### Tool response 1")
    assert FIRST_CALL in before_halpha
    assert after_halpha.startswith("\nShowing 6500-6650 A (rest frame), H-alpha marked.")


def test_it_includes_every_turn_and_observation_in_order() -> None:
    text = "".join(_texts(build_judge_messages(make_trajectory(), CV)))
    pieces = [
        "### Agent turn 1",
        FIRST_CALL,
        "### Agent turn 2",
        SECOND_CALL,
        "### Tool response 2",
    ]
    pieces += [MISSING_WINDOW, "### Agent turn 3", ANSWER]
    positions = [text.index(piece) for piece in pieces]
    assert positions == sorted(positions)


def test_it_describes_plots_as_text_when_images_are_left_out() -> None:
    messages = build_judge_messages(make_trajectory(), CV, include_images=False)
    parts = _user_parts(messages)
    assert [part["type"] for part in parts] == ["text"]
    assert "[plot not shown: 3700-9000 Angstrom, label 'Full spectrum']" in parts[0]["text"]
    assert "[plot not shown: 6500-6650 Angstrom, label 'H-alpha']" in parts[0]["text"]


def test_it_never_reveals_the_policy_to_the_judge() -> None:
    trajectory = make_trajectory()
    trajectory.policy = BLIND_POLICY
    texts = _texts(build_judge_messages(trajectory, CV))
    for secret in _strings(BLIND_POLICY):
        assert all(secret not in text for text in texts), secret


def test_it_leaves_out_the_agent_system_prompt_and_meta() -> None:
    trajectory = make_trajectory()
    texts = _texts(build_judge_messages(trajectory, CV))
    assert all(SYSTEM not in text and "hand-built" not in text for text in texts)


def test_it_tells_the_judge_when_the_trajectory_ended_without_an_answer() -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps.pop()
    trajectory.finalize("tool_limit")
    text = _texts(build_judge_messages(trajectory, CV))[-1]
    assert "ended without a final answer: it spent its tool-call budget" in text


def test_it_accepts_a_specvi_bench_task_code_for_the_same_task() -> None:
    trajectory = make_trajectory()
    trajectory.task = "cv"
    assert build_judge_messages(trajectory, CV)[1]["content"][0]["text"].startswith("## Task")


def test_it_refuses_a_task_that_is_not_the_trajectorys() -> None:
    with pytest.raises(ValueError, match="task 'WD' does not match the trajectory's task 'CV'"):
        build_judge_messages(make_trajectory(), get_task("WD"))


def test_it_refuses_a_task_that_is_not_a_task() -> None:
    with pytest.raises(ValueError, match="task must be an agent.inspection_tasks.Task"):
        build_judge_messages(make_trajectory(), "CV")


def test_it_refuses_a_trajectory_without_steps() -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps.clear()
    with pytest.raises(ValueError, match="has no steps to judge"):
        build_judge_messages(trajectory, CV)


def test_it_keeps_the_model_output_verbatim_even_when_it_holds_an_image_tag() -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps[2] = Step.from_output(
        2, "<think>see <image> above</think>\n<answer>\\boxed{YES} Broad H-alpha.</answer>"
    )
    parts = _user_parts(build_judge_messages(trajectory, CV))
    assert sum(part["type"] == "image" for part in parts) == 2
    assert "see <image> above" in parts[-1]["text"]


# --- score parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Score: 4", 4),
        ("**Score:** 4/5", 4),
        ("score = 3", 3),
        ("Final score: 5", 5),
        ('{"score": 2}', 2),
        ("\\boxed{4}", 4),
        ("SCORE:2", 2),
        ("Overall Score: **4**", 4),
        ("Score (0-5): 3", 3),
        ("Rating: 4 out of 5", 4),
        ("Score: 4.0", 4),
        ("Score: 0", 0),
        ("The answer is right.\n$\\boxed{3}$", 3),
        ('```json\n{"score": "5", "reason": "ok"}\n```', 5),
        ('{"final_score": 1, "justification": "hallucinated lines"}', 1),
        ("Score: 4 - only minor issues", 4),
        ("Score: \\boxed{2}", 2),
    ],
)
def test_it_reads_an_explicit_score_statement(reply: str, score: int) -> None:
    assert parse_judge_score(reply).score == score


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Score: 2\nOn reflection the He II line is there.\nFinal score: 4", 4),
        ("I first thought \\boxed{1}, but the plots agree. Score: 3", 3),
        ("Score: 3\n\\boxed{5}", 5),
        ('{"score": 1}\nScore: 5', 5),
    ],
)
def test_it_takes_the_last_score_statement(reply: str, score: int) -> None:
    assert parse_judge_score(reply).score == score


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Score: 6", "a score outside 0-5"),
        ("Score: -1", "a score outside 0-5"),
        ("Score: 45", "a score outside 0-5"),
        ("Score: 3.5", "not an integer 0-5"),
        ("\\boxed{4.25}", "not an integer 0-5"),
        ("Score: 8/10", "a score out of 10, not the 0-5 rubric"),
        ("Score: 3 or 4", "two different scores"),
        ("Score: 3-4", "two different scores"),
        ("Score: 3\u20134", "two different scores"),
        ("\\boxed{3, 4}", "two different scores"),
        ("Score: 4\nScore: 7", "a score outside 0-5"),  # the last one counts, even when bad
        ("score: " + "9" * 5000, "a score outside 0-5"),
        ("The H-alpha 6563 line is strong; I would give it 4.", "no score statement found"),
        ("", "no score statement found"),
        ("Score: N/A", "no score statement found"),
        ("Score: four", "no score statement found"),
        ("Scores: 4 and 5", "no score statement found"),
        ("The model scored: 4", "no score statement found"),
        ("Final answer \\boxed{YES}", "no score statement found"),
    ],
)
def test_it_gives_no_score_with_a_reason_instead_of_guessing(reply: str, reason: str) -> None:
    result = parse_judge_score(reply)
    assert result.score is None
    assert result.reason.startswith(reason)
    assert result.raw == reply


def test_it_quotes_the_bad_statement_in_the_reason() -> None:
    assert parse_judge_score("Fine work.\n**Score:** 7/5").reason == (
        "a score outside 0-5 in 'Score:** 7/5'"
    )


def test_it_returns_the_justification_before_the_score_line() -> None:
    reply = "The lines are identified correctly.\nThe redshift is consistent.\n\n**Score:** 5/5"
    assert parse_judge_score(reply) == JudgeScore(
        5, "The lines are identified correctly.\nThe redshift is consistent.", reply
    )


def test_it_returns_the_text_after_a_leading_score_line() -> None:
    reply = "Score: 2\nThe C2 bands it cites are not in the plot."
    assert parse_judge_score(reply).reason == "The C2 bands it cites are not in the plot."


def test_it_returns_the_reason_field_of_a_json_reply() -> None:
    reply = json.dumps({"score": 3, "reason": "TiO bands right, wrong H-alpha width"})
    assert parse_judge_score(reply).reason == "TiO bands right, wrong H-alpha width"


def test_it_refuses_a_reply_that_is_not_text() -> None:
    with pytest.raises(TypeError, match="judge reply must be a str; got bytes"):
        parse_judge_score(b"Score: 4")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_it_never_raises_and_never_scores_outside_the_rubric(reply: str) -> None:
    result = parse_judge_score(reply)
    assert result.score is None or 0 <= result.score <= 5
    assert isinstance(result.reason, str) and result.raw == reply


@settings(max_examples=300, deadline=None)
@given(st.text(), st.integers(min_value=0, max_value=5))
def test_it_reads_a_final_score_line_after_any_text(prefix: str, score: int) -> None:
    assert parse_judge_score(f"{prefix}\nScore: {score}").score == score


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='Score:=/ \n0123456789.-{}\\boxed*"', max_size=60))
def test_it_never_raises_on_score_like_garbage(reply: str) -> None:
    result = parse_judge_score(reply)
    assert result.score is None or 0 <= result.score <= 5
