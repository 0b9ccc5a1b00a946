"""Paper Table 4 ablations: one command per variant, and the no-tool training data."""

from __future__ import annotations

import pytest

from agent.rollout import NO_TOOL_PROMPT_NOTE
from training.ablations import main, make_parser, variant_commands
from training.data import build_rl_dataset
from training.sft import without_tool

BASE = ["--base", "/models/qwen7b", "--out", "runs/t4"]
DATA = ["--sharegpt", "sft.json", "--rl-tasks", "CV", "WD"]


def commands(variant: str, *extra: str) -> list[list[str]]:
    return variant_commands(variant, make_parser().parse_args([variant, *BASE, *DATA, *extra]))


def stages(variant: str) -> list[str]:
    return [
        next(part for part in command if part.startswith(("training.", "evaluate")))
        for command in commands(variant)
    ]


def value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("full", ["training.sft", "training.grpo", "evaluate"]),
        ("sft-only", ["training.sft", "evaluate"]),
        ("rl-only", ["training.grpo", "evaluate"]),
        ("base", ["evaluate"]),
        ("no-tool", ["training.sft", "training.grpo", "evaluate"]),
    ],
)
def test_it_runs_the_stages_of_each_table4_row(variant, expected):
    assert stages(variant) == expected


def test_it_chains_each_stage_from_the_previous_checkpoint():
    sft, grpo, evaluate = commands("full")
    assert value(sft, "--model_name_or_path") == "/models/qwen7b"
    assert value(grpo, "--model_name_or_path") == value(sft, "--output_dir") == "runs/t4/full/sft"
    assert value(evaluate, "--model-path") == value(grpo, "--output_dir")
    assert value(evaluate, "--out") == "runs/t4/full/eval.json"


def test_it_trains_rl_only_from_the_base_model():
    grpo, _ = commands("rl-only")
    assert value(grpo, "--model_name_or_path") == "/models/qwen7b"


def test_it_turns_the_tool_off_in_training_and_evaluation_for_no_tool():
    sft, grpo, evaluate = commands("no-tool")
    assert value(sft, "--use_tool") == value(grpo, "--use_tool") == "false"
    assert "--no-tool" in evaluate
    assert "--no-tool" not in commands("full")[-1]


def test_it_launches_training_with_accelerate_when_given_a_config():
    sft, *_ = commands("full", "--accelerate-config", "training/configs/accelerate/fsdp.yaml")
    assert sft[:4] == [
        "accelerate",
        "launch",
        "--config_file",
        "training/configs/accelerate/fsdp.yaml",
    ]


def test_it_names_missing_training_data(capsys):
    assert main(["sft-only", *BASE, "--dry-run"]) == 2
    assert "--sharegpt or --trajectories" in capsys.readouterr().err


def test_it_prints_the_commands_on_a_dry_run(capsys):
    assert main(["base", *BASE, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Table 4 #3: base") and "manage.py evaluate" in out


def test_it_cuts_a_demonstration_to_i0_and_the_answer_without_the_tool(two_step_trajectory):
    cut = without_tool(two_step_trajectory)
    assert cut.user_prompt.endswith(NO_TOOL_PROMPT_NOTE)
    assert [step.assistant_text for step in cut.steps] == [
        two_step_trajectory.steps[-1].assistant_text
    ]
    assert len(cut.images()) == 1
    assert cut.answer.prediction == "YES"


def test_it_prompts_no_tool_grpo_as_the_no_tool_inspection(cv_item):
    row = build_rl_dataset([cv_item], use_tool=False)[0]
    user_text = "".join(
        part["text"] or "" for part in row["prompt"][1]["content"] if part["type"] == "text"
    )
    assert user_text.endswith(NO_TOOL_PROMPT_NOTE)
