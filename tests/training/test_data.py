"""Dataset builders: SFT rows from trajectories, GRPO rows from labelled spectra, versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.formats import to_trl_example, to_verl_row, write_sharegpt_file, write_verl_parquet
from agent.inspection_tasks import get_task
from tests.training.conftest import ANSWER_NO, ANSWER_YES, scripted_trajectory, tool_call_turn
from training.data import (
    RL_COLUMNS,
    LabelledSpectrum,
    TrainingDataError,
    VerlInputs,
    build_rl_dataset,
    build_sft_dataset,
    count_tokens,
    dataset_version,
    load_trajectories_jsonl,
    prompt_trajectory,
    rl_row,
    smoke_trajectories,
    spectrum_from_row,
    verl_parquet_items,
)


@pytest.fixture(scope="module")
def processor(tiny_model_path: Path) -> Any:
    from agent.policies.qwen_processor import load_processor

    return load_processor(tiny_model_path)


@pytest.fixture
def one_step_trajectory(cv_spectrum):
    return scripted_trajectory(cv_spectrum, [ANSWER_YES])


# --- SFT ---------------------------------------------------------------------------------------


def test_it_builds_sft_rows_with_only_messages_and_images(two_step_trajectory, processor):
    data = build_sft_dataset([two_step_trajectory], processor, max_length=None)
    assert data.dataset.column_names == ["messages", "images"]
    assert len(data.dataset[0]["images"]) == 2


def test_it_writes_tool_results_as_user_tool_response_turns(two_step_trajectory, processor):
    row = build_sft_dataset([two_step_trajectory], processor, max_length=None).dataset[0]
    roles = [message["role"] for message in row["messages"]]
    tool_turn = row["messages"][3]["content"]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert [part["type"] for part in tool_turn] == ["text", "image", "text"]
    assert tool_turn[0]["text"] == "<tool_response>\n"
    assert tool_turn[2]["text"].endswith("\n</tool_response>")


def test_it_drops_rows_over_the_token_budget_and_reports_them(
    one_step_trajectory, two_step_trajectory, processor
):
    short = count_tokens(to_trl_example(one_step_trajectory, images_as="pil"), processor)
    long = count_tokens(to_trl_example(two_step_trajectory, images_as="pil"), processor)
    data = build_sft_dataset(
        [two_step_trajectory, one_step_trajectory], processor, max_length=short
    )
    assert data.trajectory_ids == [one_step_trajectory.id]
    assert [(row.trajectory_id, row.tokens) for row in data.report.dropped] == [
        (two_step_trajectory.id, long)
    ]
    assert (data.report.rows, data.report.n_dropped) == (1, 1)


def test_it_counts_image_tokens_in_the_row_length(one_step_trajectory, processor):
    example = to_trl_example(one_step_trajectory, images_as="pil")
    text_only = processor.apply_chat_template(
        [
            {"role": m["role"], "content": [p for p in m["content"] if p["type"] == "text"]}
            for m in example["messages"]
        ],
        tokenize=True,
        return_dict=True,
    )
    # I0 adds <|vision_start|>, 15 image pads (conftest.PADS_PER_PLOT) and <|vision_end|>
    assert count_tokens(example, processor) == len(text_only["input_ids"][0]) + 15 + 2


def test_it_refuses_when_every_row_is_too_long(two_step_trajectory, processor):
    with pytest.raises(TrainingDataError, match="exceed max_length=10"):
        build_sft_dataset([two_step_trajectory], processor, max_length=10)


def test_it_refuses_a_trajectory_without_assistant_turns(cv_spectrum, processor):
    empty = prompt_trajectory(cv_spectrum, get_task("CV"))
    with pytest.raises(TrainingDataError, match=f"trajectory {empty.id} has no assistant turns"):
        build_sft_dataset([empty], processor, max_length=None)


def test_it_reads_a_curation_export(tmp_path, one_step_trajectory, two_step_trajectory):
    export = tmp_path / "accepted.jsonl"
    export.write_text(
        one_step_trajectory.to_json() + "\n\n" + two_step_trajectory.to_json() + "\n",
        encoding="utf-8",
    )
    loaded = load_trajectories_jsonl(export)
    assert [t.to_json() for t in loaded] == [
        one_step_trajectory.to_json(),
        two_step_trajectory.to_json(),
    ]


def test_it_names_the_line_of_a_broken_export_row(tmp_path, one_step_trajectory):
    export = tmp_path / "accepted.jsonl"
    export.write_text(one_step_trajectory.to_json() + "\n{not json\n", encoding="utf-8")
    with pytest.raises(TrainingDataError, match="line 2"):
        load_trajectories_jsonl(export)


def test_it_reads_the_sharegpt_cold_start_layout(tmp_path, two_step_trajectory, processor):
    from agent.formats import load_sharegpt_file

    path = tmp_path / "cold_start.json"
    write_sharegpt_file([two_step_trajectory], path)
    data = build_sft_dataset(load_sharegpt_file(path), processor, max_length=None)
    direct = build_sft_dataset([two_step_trajectory], processor, max_length=None)
    assert data.dataset[0]["messages"] == direct.dataset[0]["messages"]


def test_it_scripts_two_step_smoke_demonstrations_with_the_labels():
    trajectories = smoke_trajectories(["CV"], samples_per_task=2)
    assert sorted(t.answer.prediction for t in trajectories) == ["NO", "YES"]
    assert all(t.format_ok and t.n_tool_calls == 1 for t in trajectories)


# --- GRPO --------------------------------------------------------------------------------------


def test_it_builds_rl_rows_with_the_agreed_columns(cv_item):
    dataset = build_rl_dataset([cv_item])
    row = dataset[0]
    assert tuple(dataset.column_names) == RL_COLUMNS
    assert (row["ground_truth"], row["task"], row["sample_id"]) == ("YES", "CV", cv_item.sample_id)
    assert len(row["images"]) == 1


def test_it_builds_the_prompt_the_agent_loop_sends(cv_spectrum, cv_item):
    row = rl_row(cv_item)
    loop = scripted_trajectory(cv_spectrum, [ANSWER_YES])
    loop_messages = to_trl_example(loop)["messages"][:2]
    assert row["prompt"] == loop_messages


def test_it_renders_i0_with_the_agent_tool(cv_spectrum, cv_item):
    loop = scripted_trajectory(cv_spectrum, [ANSWER_YES])
    image = rl_row(cv_item)["images"][0]
    expected = to_trl_example(loop, images_as="pil")["images"][0]
    assert np.array_equal(np.asarray(image), np.asarray(expected))


def test_it_rebuilds_the_spectrum_from_a_row(cv_spectrum, cv_item):
    rebuilt = spectrum_from_row(build_rl_dataset([cv_item])[0])
    assert np.array_equal(rebuilt.wavelength, cv_spectrum.wavelength)
    assert np.array_equal(rebuilt.flux, cv_spectrum.flux)
    assert np.array_equal(rebuilt.ivar, cv_spectrum.ivar)
    assert np.array_equal(rebuilt.mask, cv_spectrum.mask)
    assert (rebuilt.redshift, rebuilt.object_id, rebuilt.source) == (
        cv_spectrum.redshift,
        cv_spectrum.object_id,
        cv_spectrum.source,
    )


def test_it_names_missing_spectrum_columns():
    with pytest.raises(TrainingDataError, match="lacks columns"):
        spectrum_from_row({"sample_id": "x", "spectrum_flux": [1.0]})


def test_it_reads_specvi_bench_parquet_rows(tmp_path, cv_spectrum):
    trajectory = prompt_trajectory(cv_spectrum, get_task("CV"))
    row = to_verl_row(
        trajectory,
        spectrum=cv_spectrum,
        ground_truth="YES",
        index=3,
        split="train",
        data_source="specvi-mini",
    )
    path = tmp_path / "train_cv.parquet"
    write_verl_parquet([row], path)
    inputs = VerlInputs()
    (item,) = verl_parquet_items([path], inputs)
    assert (item.task, item.label, item.sample_id) == ("CV", "YES", "train_cv.parquet#3")
    assert np.array_equal(item.spectrum.flux, cv_spectrum.flux)
    assert (inputs.rows, inputs.other_system_prompt, inputs.other_user_prompt) == (1, 0, 0)


def test_it_counts_verl_rows_whose_prompt_is_not_the_one_training_uses(tmp_path, cv_spectrum):
    trajectory = prompt_trajectory(cv_spectrum, get_task("CV"))
    trajectory.user_prompt = "<image>Is this a CV? Answer in one word."
    row = to_verl_row(
        trajectory, spectrum=cv_spectrum, ground_truth="NO", index=0, split="train",
        data_source="specvi-bench",
    )  # fmt: skip
    path = tmp_path / "other_prompt.parquet"
    write_verl_parquet([row], path)
    inputs = VerlInputs()
    verl_parquet_items([path], inputs)
    assert inputs.as_sources() == {
        "verl_rows": 1,
        "verl_rows_with_other_system_prompt": 0,
        "verl_rows_with_other_user_prompt": 1,
    }


@pytest.mark.parametrize("label", ["yes", "MAYBE", ""])
def test_it_refuses_labels_other_than_yes_or_no(cv_spectrum, label):
    with pytest.raises(TrainingDataError, match="label must be YES or NO"):
        LabelledSpectrum(cv_spectrum, "CV", label, "s1")


def test_it_resolves_specvi_bench_task_codes(cv_spectrum):
    assert LabelledSpectrum(cv_spectrum, "cc", "NO", "s1").task == "CS"


# --- versions ----------------------------------------------------------------------------------


def test_it_gives_equal_rows_the_same_version(two_step_trajectory, processor):
    first = build_sft_dataset([two_step_trajectory], processor, max_length=None)
    second = build_sft_dataset([two_step_trajectory], processor, max_length=None)
    assert first.report.version == second.report.version == dataset_version(second.dataset)


def test_it_changes_the_version_when_an_answer_changes(cv_spectrum, processor):
    yes = scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_YES])
    no = scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_NO])
    versions = {
        build_sft_dataset([t], processor, max_length=None).report.version for t in (yes, no)
    }
    assert len(versions) == 2


def test_it_changes_the_version_when_a_label_changes(cv_spectrum):
    yes = build_rl_dataset([LabelledSpectrum(cv_spectrum, "CV", "YES", "s1")])
    no = build_rl_dataset([LabelledSpectrum(cv_spectrum, "CV", "NO", "s1")])
    assert dataset_version(yes) != dataset_version(no)
