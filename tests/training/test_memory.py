"""Memory arithmetic before a run starts: a 7B GRPO run on one 80 GiB GPU is refused with its
figures, LoRA fits, and the logit pass goes through TRL's fused LM head as the estimate assumes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from training.grpo import build_grpo_run
from training.grpo import parse_args as grpo_args
from training.memory import (
    GIB,
    MemoryPlanError,
    ParameterCount,
    check_fits,
    count_parameters,
    estimate_memory,
)
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
    # + the bf16 copies autocast keeps of the 7.07e9 trainable linear weights (x 2 B)
    assert (
        "weights 30.9 (vision tower 2.5 of it) + gradients 28.4 + AdamW states 56.7 + "
        "autocast bf16 copies 13.2" in message
    )
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


def test_it_counts_the_linear_weights_autocast_keeps_a_bf16_copy_of(config_only_7b):
    """By hand from the 7B config: per layer q (with bias), k and v (2 x 128 wide, with bias),
    o, and the gate/up/down MLP; plus the untied LM head. Embeddings and norms are not cast."""
    h, kv, inter, layers, vocab = 3584, 4 * 128, 18944, 28, 151936
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * inter
    count = count_parameters(config_only_7b, freeze_pattern=r".*visual.*")
    assert count.autocast_parameters == layers * per_layer + h * vocab == 7_069_956_096
    assert count.vision_parameters == count.total - count.trainable
    norms = (2 * layers + 1) * h
    assert count.trainable == count.autocast_parameters + vocab * h + norms


HAND = ParameterCount(
    total=8_000_000_000,
    trainable=7_000_000_000,
    lora=False,
    hidden_size=4096,
    intermediate_size=16384,
    num_layers=32,
    vocab_size=100_000,
    autocast_parameters=6_000_000_000,
    vision_parameters=1_000_000_000,
)


@pytest.mark.parametrize(
    ("load_dtype", "autocast", "sharded", "weights", "vision", "state", "copies"),
    [
        # fp32 master weights under bf16 autocast (the 1-GPU recipe): 4 + 4 + 8 B, + 2 B copies
        ("float32", True, False, 8e9 * 4, 1e9 * 4, 7e9 * 12, 6e9 * 2),
        ("float32", False, False, 8e9 * 4, 1e9 * 4, 7e9 * 12, 0),  # fp32 compute (CPU runs)
        ("bfloat16", True, False, 8e9 * 2, 1e9 * 2, 7e9 * 6, 0),  # pure bf16: nothing to cast
        ("bfloat16", True, True, 8e9 * 2 / 4, 1e9 * 2 / 4, 7e9 * 14 / 4, 0),  # ZeRO-3 on 4
    ],
)
def test_it_adds_the_autocast_copies_and_names_the_vision_tower(
    load_dtype, autocast, sharded, weights, vision, state, copies
):
    estimate = estimate_memory(
        HAND,
        load_dtype=load_dtype,
        batch_size=1,
        sequence_tokens=1000,
        gradient_checkpointing=True,
        processes=4 if sharded else 1,
        sharded=sharded,
        autocast=autocast,
    )
    assert estimate.weights_gib == pytest.approx(weights / GIB)
    assert estimate.vision_tower_gib == pytest.approx(vision / GIB)
    assert estimate.gradients_gib + estimate.optimizer_gib == pytest.approx(state / GIB)
    assert estimate.autocast_gib == pytest.approx(copies / GIB)
    logits = 2 * 1000 * 32768 * 4  # two fp32 tiles of 1,000 tokens x 32,768 entries
    activations = 1000 * 4096 * 2 * 32 + 1000 * (10 * 4096 + 3 * 16384) * 2
    total = weights + state + copies + logits + activations
    assert estimate.total_gib == pytest.approx(total / GIB)


def test_it_casts_only_the_fp32_adapters_of_a_lora_run():
    lora = replace(HAND, trainable=160_000_000, lora=True, autocast_parameters=160_000_000)
    estimate = estimate_memory(
        lora,
        load_dtype="bfloat16",
        batch_size=1,
        sequence_tokens=1000,
        gradient_checkpointing=True,
        autocast=True,
    )
    assert estimate.weights_gib == pytest.approx((8e9 * 2 + 160e6 * 4) / GIB)
    assert estimate.autocast_gib == pytest.approx(160e6 * 2 / GIB)
    assert estimate.vision_tower_gib == pytest.approx(1e9 * 2 / GIB)


def test_it_plans_7b_on_one_h200(config_only_7b):
    """What docs/guides/ml-engineer.md states for one H200 (140 GiB): full fine-tuning of the
    GRPO recipe is refused, one 16,384-token SFT sequence fits on paper with 4 GiB to spare,
    LoRA r64 with colocated vLLM fits."""
    full = count_parameters(config_only_7b, freeze_pattern=r".*visual.*")
    plan = {"gradient_checkpointing": True, "device_gib": 140.0, "autocast": True}
    grpo = estimate_memory(
        full, load_dtype="float32", batch_size=8, sequence_tokens=13592, vllm_share=0.35, **plan
    )
    with pytest.raises(MemoryPlanError) as refusal:
        check_fits(grpo, use_vllm=True)
    assert "= 218.3 GiB per GPU of 140.0 GiB" in str(refusal.value)
    assert refusal.value.estimate is grpo

    sft = estimate_memory(full, load_dtype="float32", batch_size=1, sequence_tokens=16384, **plan)
    state = full.total * 4 + full.trainable * 12 + full.autocast_parameters * 2
    tokens = 16384
    rest = 2 * 4096 * 32768 * 4 + tokens * 3584 * 2 * 28 + tokens * (10 * 3584 + 3 * 18944) * 2
    assert sft.total_gib == pytest.approx((state + rest) / GIB)
    assert round(sft.total_gib, 1) == 136.0
    check_fits(sft)

    lora = count_parameters(
        config_only_7b,
        freeze_pattern=r".*visual.*",
        lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lora_rank=64,
        lora_exclude=r".*visual.*",
    )
    lora_grpo = estimate_memory(
        lora, load_dtype="bfloat16", batch_size=8, sequence_tokens=13592, vllm_share=0.35, **plan
    )
    assert round(lora_grpo.total_gib, 1) == 107.2
    check_fits(lora_grpo, use_vllm=True)
