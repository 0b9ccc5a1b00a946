"""TRL preference rows (DPO) from two trajectories of the same task and spectrum.

TRL 1.16's vision DPO format is ``{"images", "prompt", "chosen", "rejected"}``: conversational
messages, ``{"type": "image"}`` placeholders in the prompt filled from ``images`` in order, and
chosen/rejected continuations that are text only (``DataCollatorForVisionPreference`` gives
images to the prompt alone). A multi-turn trajectory's tool results are images, so the two
whole completions cannot be compared once a tool result differs; a row is one assistant turn.

The preference goes to the turn where the two trajectories' decisions part, not to the first
turn whose text differs: a turn's decision is its tool call (the tool and the window asked
for; the label and the thinking are wording) or its answer (YES, NO or no valid box). Before
that turn the two made the same calls and saw the same tool results; the prompt is the chosen
trajectory's turns up to there (system, I0 and T0, its earlier calls and their images), and
chosen and rejected are each one's turn at that point: the answer when the verdicts differ, the
call when the windows differ. Two trajectories with the same decisions at every turn make a row
only when both end in an answer whose text differs (the justification is what was preferred).
Any other pair (one continues where the other stopped, only the wording of an earlier turn
differs, the tool showed them different things before they part) makes no row, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.parsing import parse_turn
from agent.trajectory import Step, Trajectory, to_messages


@dataclass(frozen=True)
class PreferenceRow:
    """A TRL vision DPO example with the images as PNG bytes (the caller stores them)."""

    prompt: list[dict[str, Any]]
    chosen: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    images: list[bytes]
    shared_turns: int  # messages in the prompt
    step: int = 0  # the step (assistant turn) the preference is on
    differs_in: str = ""  # "answer", "tool call", "turn" (neither) or "answer wording"

    def as_trl(self, image_paths: list[str]) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "chosen": self.chosen,
            "rejected": self.rejected,
            "images": image_paths,
        }


class NoPreferenceRow(ValueError):
    """The two trajectories make no DPO row; the message says why."""


def _placeholders(message: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    content, images = [], []
    for part in message["content"]:
        if part["type"] == "image":
            content.append({"type": "image"})
            images.append(part["png"])
        else:
            content.append({"type": "text", "text": part["text"]})
    return {"role": message["role"], "content": content}, images


def decision(step: Step) -> tuple[Any, ...]:
    """What a turn decided: ``("call", tool, window)``, ``("answer", prediction)``, or
    ``("turn",)`` for a turn with neither; thinking, labels and justifications are left out."""
    parsed = parse_turn(step.assistant_text)
    if parsed.answer is not None:
        return ("answer", parsed.answer.prediction)
    call = parsed.tool_call
    if call is not None:
        window = call.wavelength_range
        return ("call", call.name, tuple(sorted(window)) if window is not None else call.raw)
    return ("turn",)


def _differs_in(a: tuple[Any, ...], b: tuple[Any, ...]) -> str:
    if a[0] == b[0] == "answer":
        return "answer"
    if a[0] == b[0] == "call":
        return "tool call"
    return "turn"


def _decision_step(chosen: Trajectory, rejected: Trajectory) -> tuple[int, str]:
    """The first step whose decisions differ, and in what (see the module docstring)."""
    ours_steps, theirs_steps = chosen.steps, rejected.steps
    ours = [decision(step) for step in ours_steps]
    theirs = [decision(step) for step in theirs_steps]
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return index, _differs_in(a, b)
    if len(ours) != len(theirs):
        raise NoPreferenceRow("one continues the other")
    if not ours:
        raise NoPreferenceRow("no assistant turn")
    last_a, last_b = chosen.steps[-1].assistant_text, rejected.steps[-1].assistant_text
    if ours[-1][0] == "answer" and last_a != last_b:
        return len(ours) - 1, "answer wording"
    pairs = zip(ours_steps, theirs_steps, strict=True)
    if all(a.assistant_text == b.assistant_text for a, b in pairs):
        raise NoPreferenceRow("they were shown different prompts or tool results, same turns")
    raise NoPreferenceRow(
        "the same decisions at every turn; only the wording of an earlier turn differs"
    )


def _prompt_length(trajectory: Trajectory, step: int) -> int:
    """Messages before step ``step``'s assistant turn: system, I0 + T0, then each earlier step's
    assistant turn and its tool response."""
    length = (1 if trajectory.system_prompt else 0) + 1
    for earlier in trajectory.steps[:step]:
        length += 1 + (earlier.tool_result is not None)
    return length


def preference_row(chosen: Trajectory, rejected: Trajectory) -> PreferenceRow:
    """The DPO row of ``chosen`` over ``rejected`` (see the module docstring for the cut)."""
    if chosen.task != rejected.task:
        raise NoPreferenceRow(f"different tasks ({chosen.task} and {rejected.task})")
    better, worse = to_messages(chosen), to_messages(rejected)
    if better == worse:
        raise NoPreferenceRow("identical trajectories")
    step, differs_in = _decision_step(chosen, rejected)
    cut = _prompt_length(chosen, step)
    if cut != _prompt_length(rejected, step):
        raise NoPreferenceRow("the tool answered one and not the other before they part")
    seen = [message for message in better[:cut] if message["role"] != "assistant"]
    if seen != [message for message in worse[:cut] if message["role"] != "assistant"]:
        raise NoPreferenceRow("they were shown different prompts or tool results before they part")
    prompt, images = [], []
    for message in better[:cut]:
        converted, pngs = _placeholders(message)
        prompt.append(converted)
        images.extend(pngs)
    return PreferenceRow(
        prompt=prompt,
        chosen=[_placeholders(better[cut])[0]],
        rejected=[_placeholders(worse[cut])[0]],
        images=images,
        shared_turns=cut,
        step=step,
        differs_in=differs_in,
    )
