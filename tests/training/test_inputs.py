"""One input distribution per run (issue 24, item 3): chosen once, applied to SFT, GRPO and
evaluation, recorded in the lineage, and a run that would mix two is refused."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.formats import to_verl_row, write_sharegpt_file, write_verl_parquet
from agent.inspection_tasks import build_prompt, get_task, system_prompt
from agent.spectra import Spectrum
from agent.tool import SpectralVisualizationTool
from agent.trajectory import ImageRef, Trajectory
from tests.agent.test_trajectory import make_trajectory
from training.checkpoint import LINEAGE_FILE, new_lineage
from training.config import DataArguments
from training.data import prompt_trajectory
from training.grpo import build_grpo_run, collect_items
from training.grpo import parse_args as grpo_parse_args
from training.inputs import (
    InputDistributionError,
    evaluation_distribution,
    recorded_distribution,
)
from training.sft import build_sft_run, collect_trajectories
from training.sft import parse_args as sft_parse_args

CONFIGS = Path(__file__).resolve().parents[2] / "training" / "configs"
DATASET_SYSTEM = "You are Spec-o3, as the public cold-start set ships it."
DATASET_T0 = "<image>Is this spectrum a cataclysmic variable? Answer YES or NO."


def specvet_sized(trajectory: Trajectory, spectrum: Spectrum) -> Trajectory:
    """``trajectory`` with every picture drawn by specvet (so only its prompts differ)."""
    png = SpectralVisualizationTool(spectrum).render_full().png
    assert png is not None
    data = trajectory.to_dict()
    data["system_prompt"] = DATASET_SYSTEM
    data["user_prompt"] = DATASET_T0
    result = Trajectory.from_dict(data)
    result.initial_image = ImageRef(png, (3700.0, 9000.0), None)
    for index, step in enumerate(result.steps):
        if step.tool_result is not None and step.tool_result.image is not None:
            image = ImageRef(png, step.tool_result.image.wavelength_range, None)
            tool_result = dataclasses.replace(step.tool_result, image=image)
            result.steps[index] = dataclasses.replace(step, tool_result=tool_result)
    return result


@pytest.fixture
def cold_start_file(tmp_path: Path, cv_spectrum: Spectrum) -> Path:
    path = tmp_path / "train_sharegpt.json"
    write_sharegpt_file([specvet_sized(make_trajectory(), cv_spectrum)], path)
    return path


@pytest.fixture
def verl_file(tmp_path: Path, cv_spectrum: Spectrum) -> Path:
    trajectory = prompt_trajectory(cv_spectrum, get_task("CV"))
    trajectory.system_prompt = DATASET_SYSTEM
    trajectory.user_prompt = DATASET_T0
    row = to_verl_row(
        trajectory, spectrum=cv_spectrum, ground_truth="YES", index=0, split="train",
        data_source="specvi-bench",
    )  # fmt: skip
    path = tmp_path / "train_cv.parquet"
    write_verl_parquet([row], path)
    return path


def checkpoint_trained_on(source: Path, folder: Path, distribution: str) -> Path:
    """A copy of ``source`` whose lineage says it was SFT-trained on ``distribution``."""
    shutil.copytree(source, folder)
    lineage = new_lineage(
        stage="sft",
        base_model=source,
        dataset_version="v1",
        dataset={"rows": 1, "sources": {"input_distribution": distribution}},
        config={},
    )
    (folder / LINEAGE_FILE).write_text(json.dumps(lineage.to_dict()))
    return folder


def first_turn(prompt: list[dict[str, Any]]) -> tuple[str, str]:
    texts = ["".join(part.get("text", "") for part in message["content"]) for message in prompt[:2]]
    return texts[0], texts[1]


# --- SFT -------------------------------------------------------------------------------------


def test_it_shows_cold_start_demonstrations_with_specvets_prompts_by_default(cold_start_file):
    (trajectory,), sources = collect_trajectories(DataArguments(sharegpt=[str(cold_start_file)]))
    assert trajectory.system_prompt == system_prompt()
    assert trajectory.user_prompt == build_prompt(get_task("CV"))
    assert "cold_start_warnings" not in sources


def test_it_keeps_the_cold_start_prompts_as_shipped_with_the_dataset_choice(cold_start_file):
    data = DataArguments(sharegpt=[str(cold_start_file)], input_distribution="dataset")
    (trajectory,), _ = collect_trajectories(data)
    assert (trajectory.system_prompt, trajectory.user_prompt) == (DATASET_SYSTEM, DATASET_T0)


def test_it_refuses_specvet_inputs_for_demonstrations_drawn_at_another_size(tmp_path):
    path = tmp_path / "train_sharegpt.json"
    write_sharegpt_file([make_trajectory()], path)  # 8 x 6 pixel pictures
    with pytest.raises(InputDistributionError, match="8x6 pixels.*input_distribution 'dataset'"):
        collect_trajectories(DataArguments(sharegpt=[str(path)]))


def test_it_refuses_an_unknown_choice():
    with pytest.raises(InputDistributionError, match="must be one of"):
        collect_trajectories(DataArguments(smoke_tasks=["CV"], input_distribution="mixed"))


def test_it_records_the_choice_in_the_sft_lineage(tiny_model_path, tmp_path, cold_start_file):
    args = sft_parse_args(
        [
            "--config", str(CONFIGS / "sft_cpu_tiny.yaml"), "--model_name_or_path",
            str(tiny_model_path), "--output_dir", str(tmp_path / "sft"),
            "--sharegpt", str(cold_start_file), "--input_distribution", "dataset",
        ]
    )  # fmt: skip
    run = build_sft_run(*args)
    assert run.sources["input_distribution"] == "dataset"


# --- GRPO ------------------------------------------------------------------------------------


def test_it_shows_verl_rows_their_own_first_turn_with_the_dataset_choice(verl_file):
    data = DataArguments(verl_parquet=[str(verl_file)], input_distribution="dataset")
    (item,), sources = collect_items(data)
    from training.data import rl_row

    row = rl_row(item)
    system, user = first_turn(row["prompt"])
    assert (system, user) == (DATASET_SYSTEM, DATASET_T0.replace("<image>", ""))
    assert sources["prompt"].startswith("each verl row's own")


def test_it_rebuilds_specvets_first_turn_for_verl_rows_by_default(verl_file):
    (item,), _ = collect_items(DataArguments(verl_parquet=[str(verl_file)]))
    from training.data import rl_row

    system, user = first_turn(rl_row(item)["prompt"])
    assert system == system_prompt()
    assert user == build_prompt(get_task("CV")).replace("<image>", "")


def grpo_args(model: Path, output_dir: Path, *extra: str) -> tuple[Any, ...]:
    return grpo_parse_args(
        [
            "--config", str(CONFIGS / "grpo_cpu_tiny.yaml"), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), *extra,
        ]
    )  # fmt: skip


def test_it_refuses_grpo_from_an_sft_checkpoint_trained_on_the_other_inputs(
    tiny_model_path, tmp_path
):
    sft = checkpoint_trained_on(tiny_model_path, tmp_path / "sft", "dataset")
    with pytest.raises(InputDistributionError, match="would mix input distributions"):
        build_grpo_run(*grpo_args(sft, tmp_path / "grpo"))


def test_it_continues_grpo_on_the_inputs_the_sft_checkpoint_learnt(tiny_model_path, tmp_path):
    sft = checkpoint_trained_on(tiny_model_path, tmp_path / "sft", "dataset")
    run = build_grpo_run(*grpo_args(sft, tmp_path / "grpo", "--input_distribution", "dataset"))
    assert run.sources["input_distribution"] == "dataset"


# --- evaluation ------------------------------------------------------------------------------


def test_it_evaluates_a_checkpoint_on_the_inputs_it_was_trained_on(tiny_model_path, tmp_path):
    trained = checkpoint_trained_on(tiny_model_path, tmp_path / "sft", "specvet")
    assert recorded_distribution(trained) == "specvet"
    assert evaluation_distribution(checkpoint=trained, chosen=None) == "specvet"
    with pytest.raises(InputDistributionError, match="evaluation would mix"):
        evaluation_distribution(checkpoint=trained, chosen="dataset")


def test_it_evaluates_on_the_rows_as_shipped_without_a_recorded_choice(tiny_model_path):
    assert evaluation_distribution(checkpoint=tiny_model_path, chosen=None) == "dataset"
    assert evaluation_distribution(checkpoint=None, chosen="specvet") == "specvet"


def test_the_evaluate_command_refuses_a_checkpoint_trained_on_the_other_inputs(
    tiny_model_path, tmp_path
):
    from django.core.management import CommandError, call_command

    trained = checkpoint_trained_on(tiny_model_path, tmp_path / "sft", "specvet")
    with pytest.raises(CommandError, match="evaluation would mix input distributions"):
        call_command(
            "evaluate", "--policy", "transformers", "--model-path", str(trained),
            "--benchmark", "specvi-bench", "--data-dir", str(tmp_path), "--no-real",
            "--input-distribution", "dataset",
        )  # fmt: skip
