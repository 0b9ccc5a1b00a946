"""SpecVI-Bench rows are evaluated on their own prompt and I0 unless re-rendering is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.evaluation import evaluate, format_table, specvi_bench_samples
from agent.formats import to_verl_row, write_verl_parquet
from agent.inspection_tasks import build_prompt, get_task, system_prompt
from tests.agent.test_formats import make_spectrum, prompt_only
from tests.agent.test_trajectory import HALPHA_PNG, make_trajectory

ROW_SYSTEM = "You are Spec-o3. (the row's own system prompt)"
ROW_PROMPT = "<image>\nDecide whether this is a CV. (the row's own words)"
ANSWER = "<think>done</think><answer>\\boxed{YES} broad Balmer emission.</answer>"


class FirstTurns:
    """Answers at once and keeps the first conversation of each episode."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def info(self) -> dict[str, Any]:
        return {"name": "first-turns"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        self.seen.append(messages)
        return ANSWER

    def generate_batch(self, conversations: list[list[dict[str, Any]]]) -> list[str]:
        return [self.generate(messages) for messages in conversations]


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    return write_bench(tmp_path)


def write_bench(folder: Path) -> Path:
    """One CV test row in the SpecVI-Bench layout, with its own prompt and I0."""
    row = to_verl_row(
        prompt_only(make_trajectory()),
        spectrum=make_spectrum(),
        ground_truth="YES",
        index=0,
        split="test",
        data_source="specvi-bench",
    )
    row["prompt"] = [
        {"role": "system", "content": ROW_SYSTEM},
        {"role": "user", "content": ROW_PROMPT},
    ]
    row["images"] = [{"bytes": HALPHA_PNG}]
    (folder / "data").mkdir()
    write_verl_parquet([row], folder / "data" / "test_cv.parquet")
    return folder


def opening(messages: list[dict[str, Any]]) -> tuple[str, str, list[bytes]]:
    system, user = messages[0], messages[1]
    text = "".join(part["text"] for part in user["content"] if part["type"] == "text")
    images = [part["png"] for part in user["content"] if part["type"] == "image"]
    return system["content"][0]["text"], text, images


@pytest.mark.parametrize("batch_size", [1, 2])
def test_it_shows_each_rows_own_prompt_and_image_by_default(bench_dir, batch_size) -> None:
    samples = specvi_bench_samples(data_dir=bench_dir, split="test", tasks=["CV"])
    policy = FirstTurns()
    saved = []
    report = evaluate(
        samples,
        policy,
        benchmark="specvi-bench",
        split="test",
        batch_size=batch_size,
        on_result=lambda done, total, result, trajectory: saved.append(trajectory),
    )
    assert opening(policy.seen[0]) == (ROW_SYSTEM, ROW_PROMPT.replace("<image>", ""), [HALPHA_PNG])
    assert saved[0].meta["prompt_source"] == "dataset"
    assert saved[0].meta["initial_image_source"] == "dataset"
    assert report.inputs["prompt_source"] == {"dataset": 1}
    assert report.inputs["initial_image_source"] == {"dataset": 1}
    assert report.to_dict()["samples"][0]["prompt_source"] == "dataset"
    assert "prompt: dataset 1 · I0: dataset 1" in format_table(report)


def test_it_shows_specvets_prompt_and_rendering_when_asked_to_rerender(bench_dir) -> None:
    samples = specvi_bench_samples(data_dir=bench_dir, split="test", tasks=["CV"], rerender=True)
    policy = FirstTurns()
    saved = []
    report = evaluate(
        samples,
        policy,
        benchmark="specvi-bench",
        split="test",
        on_result=lambda done, total, result, trajectory: saved.append(trajectory),
    )
    system, text, images = opening(policy.seen[0])
    assert system == system_prompt()
    assert text == build_prompt(get_task("CV")).replace("<image>", "")
    assert images != [HALPHA_PNG] and len(images) == 1
    assert saved[0].meta["prompt_source"] == "specvet"
    assert saved[0].meta["initial_image_source"] == "specvet"
    assert report.inputs["prompt_source"] == {"specvet": 1}
    assert report.inputs["renderer"] == saved[0].meta["renderer"]
