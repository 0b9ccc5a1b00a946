"""Memory arithmetic before a run starts: a 7B GRPO run on one 80 GiB GPU is refused with its
figures, LoRA fits, and the logit pass goes through TRL's fused LM head as the estimate assumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.grpo import build_grpo_run
from training.grpo import parse_args as grpo_args
from training.memory import MemoryPlanError, count_parameters, estimate_memory
from training.sft import build_sft_run
from training.sft import parse_args as sft_args

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "training" / "configs"
# Qwen2.5-VL-7B-Instruct: 8,292,166,656 parameters, 676,550,144 of them in the vision tower.
QWEN25_VL_7B_PARAMETERS = 8_292_166_656
QWEN25_VL_7B_VISION = 676_550_144


@pytest.fixture(scope="module")
def config_only_7b(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only the 7B architecture's config.json, stored dtype bf16."""
    from transformers import AutoConfig

    from training.gpu_smoke import model_config

    path = tmp_path_factory.mktemp("qwen25vl_7b_config")
    config = model_config("7b", AutoConfig.from_pretrained(str(tiny_model_path)))
    config.dtype = torch.bfloat16
    config.save_pretrained(path)
    return path


def gpu_grpo(model: Path, *extra: str) -> tuple:
    return grpo_args(
        [
            "--config",
            str(CONFIGS / "grpo_gpu.yaml"),
            "--model_name_or_path",
            str(model),
            "--output_dir",
            "unused",
            "--use_cpu",
            "true",
            "--use_vllm",
            "false",
            "--gpu_memory_gib",
            "80",
            "--specvi_mini_tasks",
            "CV",
            "--specvi_mini_positives",
            "1",
            "--specvi_mini_negatives",
            "1",
            *extra,
        ]
    )


def test_it_counts_the_7b_parameters_without_weights(config_only_7b):
    full = count_parameters(config_only_7b, freeze_pattern=r".*visual.*")
    # The smoke architecture differs from the release by 0.01 % (no checkpoint to compare here).
    assert full.total == pytest.approx(QWEN25_VL_7B_PARAMETERS, rel=1e-3)
    assert full.total - full.trainable == pytest.approx(QWEN25_VL_7B_VISION, rel=1e-3)


def test_it_refuses_the_gpu_grpo_recipe_of_a_7b_on_one_80_gib_gpu(config_only_7b):
    with pytest.raises(MemoryPlanError) as refusal:
        build_grpo_run(*gpu_grpo(config_only_7b))
    message = str(refusal.value)
    # fp32 master weights 8.29e9 x 4 B, gradients and AdamW states of 7.62e9 trainable x 12 B
    assert "weights 30.9 + gradients 28.4 + AdamW states 56.7" in message
    assert "of 80.0 GiB" in message and "use_lora: true" in message and "ZeRO-3" in message


def test_it_refuses_full_sft_of_a_7b_on_one_80_gib_gpu(config_only_7b):
    args = sft_args(
        [
            "--config",
            str(CONFIGS / "sft_gpu.yaml"),
            "--model_name_or_path",
            str(config_only_7b),
            "--output_dir",
            "unused",
            "--use_cpu",
            "true",
            "--gpu_memory_gib",
            "80",
            "--smoke_tasks",
            "CV",
        ]
    )
    with pytest.raises(MemoryPlanError, match="GiB per GPU of 80.0 GiB"):
        build_sft_run(*args)


def test_it_lets_a_7b_lora_grpo_run_with_colocated_vllm_fit(config_only_7b):
    count = count_parameters(
        config_only_7b,
        freeze_pattern=r".*visual.*",
        lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lora_rank=64,
        lora_exclude=r".*visual.*",
    )
    assert count.trainable == 64 * 90112 * 28  # r x (in + out) summed over a layer, 28 layers
    estimate = estimate_memory(
        count,
        load_dtype="bfloat16",
        batch_size=2,  # 8 full-length sequences of activations alone take ~39 GiB
        sequence_tokens=5400 + 8192,
        gradient_checkpointing=True,
        vllm_share=0.35,
        device_gib=80.0,
    )
    assert estimate.total_gib < 80.0
    assert estimate.logits_gib == 1.0  # two fp32 tiles of 4096 x 32768
    assert estimate.logits_unfused_gib == pytest.approx(2 * 13592 * 151936 * 4 / 2**30)


def test_it_shards_the_training_state_over_zero3_processes(config_only_7b):
    count = count_parameters(config_only_7b, freeze_pattern=r".*visual.*")
    one = estimate_memory(
        count, load_dtype="bfloat16", batch_size=1, sequence_tokens=1, gradient_checkpointing=True
    )
    eight = estimate_memory(
        count,
        load_dtype="bfloat16",
        batch_size=1,
        sequence_tokens=1,
        gradient_checkpointing=True,
        processes=8,
        sharded=True,
    )
    per_gpu = eight.weights_gib + eight.gradients_gib + eight.optimizer_gib
    assert per_gpu == pytest.approx((2 * count.total + 14 * count.trainable) / 8 / 2**30)
    assert per_gpu < (one.weights_gib + one.gradients_gib + one.optimizer_gib) / 4


def test_it_scores_tokens_through_trls_fused_lm_head(tiny_model_path, tmp_path):
    """The estimate's logit term assumes TRL never materialises batch x tokens x vocab logits."""
    args = sft_args(
        [
            "--config",
            str(CONFIGS / "sft_cpu_tiny.yaml"),
            "--model_name_or_path",
            str(tiny_model_path),
            "--output_dir",
            str(tmp_path),
        ]
    )
    run = build_sft_run(*args)
    ids = torch.tensor([[1, 2, 3, 4]])
    outputs = run.trainer.model(input_ids=ids, labels=ids, fused_lm_head=True)
    assert outputs.log_probs.shape == (1, 3) and getattr(outputs, "logits", None) is None
