"""Tests of the canonical trajectory: lossless JSON, outcome, and the policy message list.

``make_png`` and ``make_trajectory`` are the hand-built fixtures the format tests reuse.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from types import SimpleNamespace

import pytest
from PIL import Image

from agent.parsing import TOOL_NAME
from agent.trajectory import (
    FinalAnswer,
    ImageRef,
    SpectrumRef,
    Step,
    ToolResponse,
    Trajectory,
    TrajectoryFormatError,
    step_to_dict,
    to_messages,
)

PROMPT = (
    '<image>\nAnalyze the provided spectrum to determine if it is a "Cataclysmic Variables (CV)".'
)
SYSTEM = "You inspect spectra. Call spectral_visualization_tool to zoom."
FIRST_CALL = (
    "<think>Balmer emission looks broad; zoom on H-alpha.</think>\n"
    '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
    '{"wavelength_range": [6500, 6650], "label": "H-alpha"}}\n</tool_call>'
)
SECOND_CALL = (
    "<think>Check He II 4686.</think>\n"
    '<tool_call>{"name": "spectral_visualization_tool", "arguments": '
    '{"wavelength_min": "9000", "wavelength_max": 9100, "label": "He II"}}</tool_call>'
)
ANSWER = (
    "<think>H-alpha is broad and double-peaked.</think>\n"
    "<answer>\\boxed{YES} Broad double-peaked H-alpha emission.</answer>"
)
MISSING_WINDOW = "The window 9000-9100 is outside the coverage 3700-9000; ask inside it."


def make_png(color: tuple[int, int, int], size: tuple[int, int] = (8, 6)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


I0_PNG = make_png((255, 255, 255))
HALPHA_PNG = make_png((200, 30, 30))


def make_trajectory(*, finalize: bool = True) -> Trajectory:
    """Two calls (one rendered, one refused) and a YES answer, with every field filled."""
    trajectory = Trajectory.new(
        task="CV",
        spectrum=SpectrumRef(
            "LAMOST J0001+0001", "LAMOST", "spec-55859-F5902_sp01-001.fits", 0.0012
        ),
        system_prompt=SYSTEM,
        user_prompt=PROMPT,
        initial_image=ImageRef(I0_PNG, (3700.0, 9000.0), "Full spectrum"),
        policy={"name": "scripted", "model": None, "sampling": {"temperature": 0.0}},
        meta={"ground_truth": "YES", "note": "hand-built"},
    )
    trajectory.steps.append(
        Step.from_output(
            0,
            FIRST_CALL,
            tool_result=ToolResponse(
                ok=True,
                text="Showing 6500-6650 A (rest frame), H-alpha marked.",
                image=ImageRef(HALPHA_PNG, (6500.0, 6650.0), "H-alpha"),
            ),
            generate_s=1.25,
            tool_s=0.125,
            prompt_tokens=812,
            completion_tokens=64,
        )
    )
    trajectory.steps.append(
        Step.from_output(
            1,
            SECOND_CALL,
            tool_result=ToolResponse(ok=False, text=MISSING_WINDOW),
            generate_s=0.5,
            tool_s=0.01,
        )
    )
    trajectory.steps.append(Step.from_output(2, ANSWER, generate_s=0.75, completion_tokens=40))
    trajectory.errors.append("policy retried once after a timeout")
    if finalize:
        trajectory.finalize("answer")
    return trajectory


def test_it_round_trips_json_byte_identically() -> None:
    text = make_trajectory().to_json()
    assert Trajectory.from_json(text).to_json() == text


def test_it_round_trips_indented_json_byte_identically() -> None:
    text = make_trajectory().to_json(indent=2)
    assert Trajectory.from_json(text).to_json(indent=2) == text


def test_it_keeps_every_field_through_json() -> None:
    original = make_trajectory()
    original.format_reasons = ["turn 2: a reason, so the list is not empty"]
    restored = Trajectory.from_json(original.to_json())
    for field in dataclasses.fields(Trajectory):
        value = getattr(original, field.name)
        if field.default is not dataclasses.MISSING:  # the fixture must exercise every field
            assert value != field.default, field.name
        if field.default_factory is not dataclasses.MISSING:
            assert value != field.default_factory(), field.name
        assert getattr(restored, field.name) == value, field.name
    assert restored == original


def test_it_keeps_every_step_field_through_json() -> None:
    original = make_trajectory()
    restored = Trajectory.from_json(original.to_json())
    first = original.steps[0]
    assert all(getattr(first, field.name) is not None for field in dataclasses.fields(Step))
    assert restored.steps == original.steps
    assert restored.steps[0].tool_result.image.png == HALPHA_PNG


def test_it_stores_png_as_base64_in_json() -> None:
    data = json.loads(make_trajectory().to_json())
    assert data["initial_image"]["png_base64"].startswith("iVBORw0KGgo")  # b"\x89PNG\r\n\x1a\n"


def test_it_writes_each_png_with_the_encoder_it_is_given() -> None:
    trajectory = make_trajectory()
    seen: list[bytes] = []

    def by_length(png: bytes) -> tuple[str, str]:
        seen.append(png)
        return "png_length", str(len(png))

    data = trajectory.to_dict(png=by_length)
    assert data["initial_image"] == {
        "png_length": str(len(trajectory.initial_image.png)),
        "wavelength_range": list(trajectory.initial_image.wavelength_range),
        "label": trajectory.initial_image.label,
    }
    assert data["steps"][0]["tool_result"]["image"]["png_length"] == str(len(HALPHA_PNG))
    assert HALPHA_PNG in seen
    step = trajectory.steps[0]
    assert step_to_dict(step, png=by_length) == data["steps"][0]
    assert "png_base64" in step_to_dict(step)["tool_result"]["image"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=99), "schema 99 is not supported"),
        (lambda d: d.update(surprise=1), "unknown keys ['surprise']"),
        (lambda d: d.pop("task"), "missing 'task'"),
        (lambda d: d.update(n_tool_calls="2"), "n_tool_calls must be int"),
        (lambda d: d.update(format_ok=1), "format_ok must be bool"),
        (lambda d: d["steps"][0].update(index=True), "index must be int"),
        (lambda d: d["initial_image"].update(png_base64="not base64!"), "not base64"),
        (lambda d: d["steps"][0]["tool_call"].pop("raw"), "tool_call is missing 'raw'"),
        (lambda d: d.update(stop_reason="bored"), "stop_reason 'bored' is not one of"),
        (lambda d: d["answer"].update(prediction="MAYBE"), "prediction must be YES, NO or None"),
    ],
)
def test_it_rejects_a_broken_serialized_trajectory(change, message: str) -> None:
    data = make_trajectory().to_dict()
    change(data)
    with pytest.raises(TrajectoryFormatError, match=_escaped(message)):
        Trajectory.from_dict(data)


def _escaped(text: str) -> str:
    return re.escape(text)


def test_it_refuses_meta_that_is_not_json() -> None:
    trajectory = make_trajectory()
    trajectory.meta["labels"] = {"YES", "NO"}
    with pytest.raises(TrajectoryFormatError, match="not JSON-safe"):
        trajectory.to_json()


def test_it_refuses_steps_whose_index_is_out_of_order() -> None:
    trajectory = make_trajectory()
    trajectory.steps[1].index = 5
    with pytest.raises(TrajectoryFormatError, match="position 1 has index 5"):
        trajectory.to_dict()


@pytest.mark.parametrize("prompt", ["Analyze this.", "<image><image>Analyze"])
def test_it_requires_one_image_placeholder_in_the_prompt(prompt: str) -> None:
    with pytest.raises(TrajectoryFormatError, match="exactly one <image>"):
        Trajectory.new(
            task="CV",
            spectrum=SpectrumRef("x", "LAMOST", "x.fits"),
            system_prompt="",
            user_prompt=prompt,
            initial_image=ImageRef(I0_PNG),
        )


def test_it_refuses_image_bytes_that_are_not_png() -> None:
    with pytest.raises(TrajectoryFormatError, match="must be PNG bytes"):
        ImageRef(b"\xff\xd8\xff\xe0 a jpeg")


def test_it_refuses_an_unknown_stop_reason() -> None:
    with pytest.raises(TrajectoryFormatError, match="stop_reason 'length'"):
        make_trajectory(finalize=False).finalize("length")


def test_it_computes_the_outcome_from_the_steps() -> None:
    trajectory = make_trajectory()
    assert trajectory.answer == FinalAnswer("YES", "Broad double-peaked H-alpha emission.")
    assert (trajectory.stop_reason, trajectory.format_ok, trajectory.format_reasons) == (
        "answer",
        True,
        [],
    )
    assert (trajectory.n_tool_calls, trajectory.n_tool_errors) == (2, 1)


def test_it_marks_the_format_bad_when_a_turn_is_malformed() -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps[2] = Step.from_output(2, "<answer>\\boxed{YES}</answer> done")
    trajectory.finalize("answer")
    assert trajectory.format_ok is False
    assert trajectory.format_reasons == [
        "turn 3: text after </answer>: 'done'",
        "turn 3: missing <think>...</think>; every turn starts with its reasoning",
    ]
    assert trajectory.answer == FinalAnswer("YES", "")


def test_it_has_no_answer_when_stopped_at_the_tool_limit() -> None:
    trajectory = make_trajectory(finalize=False)
    del trajectory.steps[2]
    trajectory.finalize("tool_limit")
    assert trajectory.answer is None and trajectory.format_ok is False


def test_it_parses_think_and_call_into_the_step() -> None:
    step = make_trajectory().steps[1]
    assert step.think == "Check He II 4686."
    assert step.tool_call is not None
    assert (step.tool_call.name, step.tool_call.wavelength_range, step.tool_call.label) == (
        TOOL_NAME,
        (9000.0, 9100.0),
        "He II",
    )
    assert step.tool_call.arguments == {
        "wavelength_min": "9000",
        "wavelength_max": 9100,
        "label": "He II",
    }


def test_it_builds_a_tool_response_from_a_tool_result() -> None:
    result = SimpleNamespace(
        ok=True, text="Showing 6500-6650", png=HALPHA_PNG, wavelength_range=(6500, 6650), label="Ha"
    )
    assert ToolResponse.from_tool_result(result) == ToolResponse(
        True, "Showing 6500-6650", ImageRef(HALPHA_PNG, (6500.0, 6650.0), "Ha")
    )


def test_it_lists_images_in_conversation_order() -> None:
    assert make_trajectory().images() == [I0_PNG, HALPHA_PNG]


def test_it_returns_the_last_assistant_text() -> None:
    assert make_trajectory().final_text() == ANSWER


def test_it_builds_the_policy_messages() -> None:
    assert to_messages(make_trajectory()) == [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "png": I0_PNG},
                {"type": "text", "text": PROMPT.removeprefix("<image>")},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": FIRST_CALL}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<tool_response>\n"},
                {"type": "image", "png": HALPHA_PNG},
                {
                    "type": "text",
                    "text": "Showing 6500-6650 A (rest frame), H-alpha marked.\n</tool_response>",
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": SECOND_CALL}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"<tool_response>\n{MISSING_WINDOW}\n</tool_response>"}
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
    ]


def test_it_builds_messages_a_policy_accepts_mid_episode() -> None:
    from agent.policies.base import validate_messages

    trajectory = make_trajectory(finalize=False)
    del trajectory.steps[2]
    validate_messages(to_messages(trajectory))


def test_it_leaves_out_an_empty_system_prompt() -> None:
    trajectory = make_trajectory()
    trajectory.system_prompt = ""
    assert to_messages(trajectory)[0]["role"] == "user"
