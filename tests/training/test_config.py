"""Training configs: recipe defaults, the SPECTRA preset, YAML files and command-line flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetGRPOConfig,
    SpecvetSFTConfig,
    config_to_dict,
    parse_config,
)

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "training" / "configs"
SFT_TYPES = (ModelArguments, DataArguments, RunArguments, SpecvetSFTConfig)
GRPO_TYPES = (ModelArguments, DataArguments, RunArguments, SpecvetGRPOConfig)
# The GPU defaults ask for bf16; on this CPU-only host TrainingArguments accepts that only with use_cpu.
ON_CPU = ["--output_dir", "out", "--use_cpu", "true"]


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_it_defaults_sft_to_the_public_cold_start_recipe():
    *_, sft = parse_config(SFT_TYPES, ON_CPU)
    assert (sft.learning_rate, sft.num_train_epochs, sft.warmup_steps) == (2e-5, 5.0, 0.05)
    assert (sft.lr_scheduler_type.value, sft.bf16) == ("cosine", True)
    assert (sft.assistant_only_loss, sft.max_length, sft.logging_steps) == (True, None, 1)


def test_it_defaults_grpo_to_eight_rollouts_and_eight_tool_calls():
    *_, grpo = parse_config(GRPO_TYPES, ON_CPU)
    assert (grpo.num_generations, grpo.max_tool_calling_iterations) == (8, 8)
    assert grpo.mask_truncated_completions is True
    assert (grpo.reward, grpo.reward_alpha) == ("spec_o3", 0.2)


def test_it_defaults_grpo_to_token_mean_loss_with_its_reason():
    *_, grpo = parse_config(GRPO_TYPES, ON_CPU)
    assert grpo.loss_type == "dapo"
    record = grpo.loss_record()
    assert record["loss_type"] == "dapo" and "token-mean" in record["why_default"]


def test_it_offers_the_grpo_loss_too():
    *_, grpo = parse_config(GRPO_TYPES, [*ON_CPU, "--loss_type", "grpo"])
    assert grpo.loss_record()["computes"].startswith("seq-mean-token-mean")


def test_it_trains_the_gpu_recipe_with_token_mean_loss():
    *_, grpo = parse_config(GRPO_TYPES, ["--config", str(CONFIGS / "grpo_gpu.yaml"), *ON_CPU])
    assert grpo.loss_type == "dapo"


def test_it_freezes_the_vision_tower_and_trains_all_weights_by_default():
    model, *_ = parse_config(GRPO_TYPES, ON_CPU)
    assert (model.freeze_vision_tower, model.use_lora, model.lora_exclude_modules) == (
        True,
        False,
        r".*visual.*",
    )


def test_it_applies_the_spectra_table8_preset():
    model, *_, grpo = parse_config(GRPO_TYPES, [*ON_CPU, "--preset", "spectra"])
    assert (grpo.beta, grpo.epsilon, grpo.epsilon_high) == (0.001, 0.2, 0.4)
    assert (grpo.learning_rate, grpo.temperature, grpo.top_p) == (1e-6, 1.0, 0.95)
    assert (model.use_lora, model.lora_r, model.lora_alpha) == (True, 64, 64)
    assert grpo.reward == "spectra"


def test_it_lets_the_file_override_the_preset_and_flags_override_the_file(tmp_path):
    config = write_yaml(tmp_path, "preset: spectra\nlora_r: 16\nbeta: 0.01\n")
    model, *_, grpo = parse_config(GRPO_TYPES, [*ON_CPU, "--config", str(config), "--beta", "0.5"])
    assert (model.lora_r, grpo.beta, grpo.epsilon_high) == (16, 0.5, 0.4)


def test_it_sets_environment_variables_from_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECVET_TEST_VARIABLE", raising=False)
    config = write_yaml(tmp_path, "env:\n  SPECVET_TEST_VARIABLE: '1'\n")
    parse_config(SFT_TYPES, [*ON_CPU, "--config", str(config)])
    assert os.environ["SPECVET_TEST_VARIABLE"] == "1"


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("learning_rat: 0.1\n", [], r"sets unknown fields \['learning_rat'\]"),
        ("- a list\n", [], "must hold a YAML mapping"),
        ("", ["--preset", "dapo"], "unknown preset 'dapo'"),
        ("reward: accuracy\n", [], "reward must be one of"),
        ("loss_type: bnpo\n", [], r"loss_type must be one of \['dapo', 'grpo'\]"),
    ],
)
def test_it_rejects_bad_configs(tmp_path, text, flags, message):
    config = write_yaml(tmp_path, text)
    with pytest.raises(ValueError, match=message):
        parse_config(GRPO_TYPES, [*ON_CPU, "--config", str(config), *flags])


@pytest.mark.parametrize(
    ("name", "types"), [("sft_cpu_tiny.yaml", SFT_TYPES), ("grpo_cpu_tiny.yaml", GRPO_TYPES)]
)
def test_it_reads_the_cpu_test_configs_as_cpu_safe(name, types):
    *_, training = parse_config(types, ["--config", str(CONFIGS / name)])
    assert (training.use_cpu, training.bf16, training.gradient_checkpointing) == (
        True,
        False,
        False,
    )
    assert 0 < training.max_steps <= 2


@pytest.mark.parametrize(
    ("name", "types"), [("sft_gpu.yaml", SFT_TYPES), ("grpo_gpu.yaml", GRPO_TYPES)]
)
def test_it_reads_the_gpu_recipe_configs(name, types):
    *_, training = parse_config(types, ["--config", str(CONFIGS / name), "--use_cpu", "true"])
    assert training.bf16 is True


def test_it_turns_configs_into_json_for_the_lineage():
    values = config_to_dict(*parse_config(GRPO_TYPES, ON_CPU))
    assert json.loads(json.dumps(values))["SpecvetGRPOConfig"]["num_generations"] == 8
    assert values["ModelArguments"]["lora_target_modules"][0] == "q_proj"
