"""TRL preference rows (DPO) from two trajectories of the same task and spectrum.

TRL 1.16's vision DPO format is ``{"images", "prompt", "chosen", "rejected"}``: conversational
messages, ``{"type": "image"}`` placeholders in the prompt filled from ``images`` in order, and
chosen/rejected continuations that are text only (``DataCollatorForVisionPreference`` gives
images to the prompt alone). A multi-turn trajectory's tool results are images, so a pair is
cut where the two trajectories part: the prompt is every turn they share (system, I0 and T0,
then any identical steps and their tool images); chosen and rejected are each one's next
assistant turn. A pair that parts anywhere else (one continues where the other stopped, or the
first difference is not the model's own turn) makes no row, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.trajectory import Trajectory, to_messages


@dataclass(frozen=True)
class PreferenceRow:
    """A TRL vision DPO example with the images as PNG bytes (the caller stores them)."""

    prompt: list[dict[str, Any]]
    chosen: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    images: list[bytes]
    shared_turns: int  # messages in the prompt

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


def preference_row(chosen: Trajectory, rejected: Trajectory) -> PreferenceRow:
    """The DPO row of ``chosen`` over ``rejected`` (see the module docstring for the cut)."""
    if chosen.task != rejected.task:
        raise NoPreferenceRow(f"different tasks ({chosen.task} and {rejected.task})")
    better, worse = to_messages(chosen), to_messages(rejected)
    shared = 0
    while shared < min(len(better), len(worse)) and better[shared] == worse[shared]:
        shared += 1
    if shared == len(better) or shared == len(worse):
        raise NoPreferenceRow(
            "identical trajectories" if len(better) == len(worse) else "one continues the other"
        )
    if better[shared]["role"] != "assistant" or worse[shared]["role"] != "assistant":
        raise NoPreferenceRow(
            f"they first differ in a {better[shared]['role']} turn, not the model's own"
        )
    if not any(message["role"] == "user" for message in better[:shared]):
        raise NoPreferenceRow("no shared prompt")
    prompt, images = [], []
    for message in better[:shared]:
        converted, pngs = _placeholders(message)
        prompt.append(converted)
        images.extend(pngs)
    return PreferenceRow(
        prompt=prompt,
        chosen=[_placeholders(better[shared])[0]],
        rejected=[_placeholders(worse[shared])[0]],
        images=images,
        shared_turns=shared,
    )
