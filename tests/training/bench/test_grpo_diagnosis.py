"""The text-hint control of ``training.bench.grpo_diagnosis``: the same GRPO rows with the label
also written in the prompt, the image kept; the hint follows the row's label, never another's."""

from __future__ import annotations

import pytest

from training.bench.grpo_diagnosis import hint_text, hinted
from training.bench.learning import _grpo_prompt


def test_it_writes_each_rows_own_label_after_the_question_and_keeps_the_image():
    from datasets import Dataset

    rows = Dataset.from_list(
        [{"prompt": _grpo_prompt("visible"), "ground_truth": label} for label in ("YES", "NO")]
    )
    plain = _grpo_prompt("visible")
    for row, label in zip(hinted(rows), ("YES", "NO"), strict=True):
        user = row["prompt"][1]["content"]
        assert [part["type"] for part in user] == ["image", "text"]
        assert user[1]["text"] == plain[1]["content"][1]["text"] + hint_text(label)
        assert row["prompt"][0] == plain[0]


def test_it_refuses_an_unknown_mode(tmp_path):
    from training.bench.grpo_diagnosis import diagnose
    from training.bench.learning import PRESETS

    with pytest.raises(ValueError, match="mode"):
        diagnose("text", tmp_path, PRESETS["cpu"])
