"""GPU configs on the CPU: vLLM generation settings, the launch layouts they may run on, and
the accelerate files the README's launch commands name."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
import yaml

from training.config import check_generation_setup, launch_layout
from training.grpo import parse_args

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "training" / "configs"
ON_CPU = ["--output_dir", "out", "--use_cpu", "true"]


def gpu_grpo(*extra: str):
    return parse_args(["--config", str(CONFIGS / "grpo_gpu.yaml"), *ON_CPU, *extra])[3]


@pytest.fixture
def vllm_installed():
    with patch("training.config.importlib.util.find_spec", return_value=object()):
        yield


def test_it_generates_grpo_rollouts_with_colocated_vllm_in_the_gpu_config():
    args = gpu_grpo()
    assert (args.use_vllm, args.vllm_mode, args.vllm_tensor_parallel_size) == (True, "colocate", 1)
    assert (args.vllm_enable_sleep_mode, args.vllm_max_model_length) == (False, 16384)
    assert args.log_completions is True


def test_it_accepts_the_gpu_config_on_eight_sharded_ranks(vllm_installed):
    check_generation_setup(gpu_grpo(), world_size=8, sharded=True)


def test_it_accepts_server_mode_with_one_training_process(vllm_installed):
    check_generation_setup(gpu_grpo("--vllm_mode", "server"), world_size=1, sharded=False)


@pytest.mark.parametrize(
    ("extra", "world_size", "sharded", "message"),
    [
        (["--vllm_mode", "server"], 8, False, "server"),
        (["--vllm_tensor_parallel_size", "2"], 8, False, "tensor_parallel"),
        (["--vllm_enable_sleep_mode", "true"], 8, True, "sleep_mode"),
        (["--use_vllm", "false"], 8, True, "HF generate"),
    ],
)
def test_it_refuses_layouts_whose_ranks_would_deadlock_in_the_tool_loop(
    vllm_installed, extra, world_size, sharded, message
):
    with pytest.raises(ValueError, match=message) as error:
        check_generation_setup(gpu_grpo(*extra), world_size=world_size, sharded=sharded)
    assert "different numbers of generation calls" in str(error.value)


def test_it_allows_hf_generate_on_data_parallel_ranks():
    check_generation_setup(gpu_grpo("--use_vllm", "false"), world_size=8, sharded=False)


def test_it_names_the_missing_vllm_install():
    with pytest.raises(ValueError, match="requirements-gpu.txt"):
        check_generation_setup(gpu_grpo(), world_size=1, sharded=False)


def test_it_reads_the_launch_layout_accelerate_sets(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert launch_layout() == (8, True)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    assert launch_layout() == (8, False)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("deepspeed_zero3.yaml", {"distributed_type": "DEEPSPEED", "num_processes": 8}),
        ("fsdp.yaml", {"distributed_type": "FSDP", "num_processes": 8}),
        ("single_gpu.yaml", {"distributed_type": "NO", "num_processes": 1}),
    ],
)
def test_it_ships_the_accelerate_configs_the_readme_launches(name, expected):
    config = yaml.safe_load((CONFIGS / "accelerate" / name).read_text())
    assert {key: config[key] for key in expected} == expected
    assert config["mixed_precision"] == "bf16"
    if name == "deepspeed_zero3.yaml":
        assert config["deepspeed_config"]["zero_stage"] == 3
        assert config["deepspeed_config"]["zero3_save_16bit_model"] is True
    if name == "fsdp.yaml":
        wrapped = config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"].split(",")
        assert wrapped == ["Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock"]
        assert config["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_it_names_layers_the_model_really_has(tiny_model_path):
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_model_path))
    classes = {type(module).__name__ for module in model.modules()}
    config = yaml.safe_load((CONFIGS / "accelerate" / "fsdp.yaml").read_text())
    assert set(config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"].split(",")) <= classes
