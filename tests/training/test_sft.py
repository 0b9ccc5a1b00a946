"""Cold-start SFT on the tiny model: loss mask, one template for SFT and serving, a CPU run."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from agent.chat_template import load_chat_template
from agent.policies import build_policy
from agent.splits import SplitMembers, load_training_spectra
from agent.trajectory import Trajectory, to_messages
from tests.training.conftest import ANSWER_YES, PADS_PER_PLOT, tool_call_turn
from training.callbacks import read_metrics
from training.checkpoint import LineageError, load_lineage, new_lineage
from training.config import DataArguments, ModelArguments, RunArguments
from training.sft import build_sft_run, collect_trajectories, main, parse_args, save_sft_run

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "training" / "configs" / "sft_cpu_tiny.yaml"
VISION = "<|vision_start|>" + "<|image_pad|>" * PADS_PER_PLOT + "<|vision_end|>"


def expected_layout(trajectory: Trajectory) -> str:
    """The Qwen2.5-VL layout of a trajectory, written out by hand from its parts."""
    text = f"<|im_start|>system\n{trajectory.system_prompt}<|im_end|>\n"
    text += f"<|im_start|>user\n{VISION}{trajectory.user_prompt.replace('<image>', '')}<|im_end|>\n"
    for step in trajectory.steps:
        text += f"<|im_start|>assistant\n{step.assistant_text}<|im_end|>\n"
        if step.tool_result is not None:
            image = VISION if step.tool_result.image is not None else ""
            text += (
                f"<|im_start|>user\n<tool_response>\n{image}{step.tool_result.text}"
                "\n</tool_response><|im_end|>\n"
            )
    return text


def cpu_args(model_path: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(CPU_CONFIG),
        "--model_name_or_path",
        str(model_path),
        "--output_dir",
        str(output_dir),
        *extra,
    ]


@pytest.fixture
def collated(tiny_model_path, tmp_path, two_step_trajectory) -> dict[str, Any]:
    model_args, data_args, run_args, training_args = parse_args(cpu_args(tiny_model_path, tmp_path))
    run = build_sft_run(
        model_args, data_args, run_args, training_args, trajectories=[two_step_trajectory]
    )
    batch = run.trainer.data_collator([run.trainer.train_dataset[0]])
    return {"batch": batch, "tokenizer": run.processor.tokenizer}


def test_it_trains_exactly_the_assistant_turns(collated):
    ids, labels = collated["batch"]["input_ids"][0], collated["batch"]["labels"][0]
    trained = collated["tokenizer"].decode(ids[labels != -100])
    assert trained == tool_call_turn() + "<|im_end|>\n" + ANSWER_YES + "<|im_end|>\n"


def test_it_puts_no_loss_on_image_tokens(collated):
    ids, labels = collated["batch"]["input_ids"][0], collated["batch"]["labels"][0]
    pad = collated["tokenizer"].convert_tokens_to_ids("<|image_pad|>")
    assert int((ids == pad).sum()) == 2 * PADS_PER_PLOT
    assert int(((ids == pad) & (labels != -100)).sum()) == 0


def test_it_renders_sft_rows_in_the_pinned_layout(collated, two_step_trajectory):
    tokenizer = collated["tokenizer"]
    expected = tokenizer(expected_layout(two_step_trajectory), add_special_tokens=False)
    assert collated["batch"]["input_ids"][0].tolist() == expected["input_ids"]


def test_it_prompts_serving_with_the_sft_prefix(collated, tiny_model_path, two_step_trajectory):
    policy = build_policy({"kind": "transformers", "model_path": str(tiny_model_path)})
    sft_ids = collated["batch"]["input_ids"][0].tolist()
    messages = to_messages(two_step_trajectory)
    for before_turn in (2, 4):  # the prompts of the first and of the second assistant turn
        served = policy.prepare_inputs(messages[:before_turn])["input_ids"][0].tolist()
        assert sft_ids[: len(served)] == served
        assert policy.processor.tokenizer.decode(served).endswith("<|im_start|>assistant\n")


# --- a CPU run through the command line --------------------------------------------------------


@pytest.fixture(scope="module")
def cli_run(tiny_model_path, tmp_path_factory) -> dict[str, Any]:
    output_dir = tmp_path_factory.mktemp("sft_run")
    validation = [
        "--validation_tasks",
        "CV",
        "--validation_samples_per_task",
        "1",
        "--validation_every_steps",
        "2",
        "--validation_max_new_tokens",
        "4",
        "--validation_max_tool_calls",
        "0",
    ]
    started = time.perf_counter()
    checkpoint = main(*parse_args(cpu_args(tiny_model_path, output_dir, *validation)))
    return {"checkpoint": checkpoint, "seconds": time.perf_counter() - started}


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_it_changes_the_language_model_weights(cli_run, tiny_model_path):
    before, after = weights(tiny_model_path), weights(cli_run["checkpoint"])
    changed = [n for n in before if "visual" not in n and not torch.equal(before[n], after[n])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed


@pytest.mark.slow
def test_it_leaves_the_frozen_vision_tower_untouched(cli_run, tiny_model_path):
    before, after = weights(tiny_model_path), weights(cli_run["checkpoint"])
    vision = [n for n in before if "visual" in n]
    assert vision and all(torch.equal(before[n], after[n]) for n in vision)


@pytest.mark.slow
def test_it_sends_per_step_loss_to_the_metrics_file(cli_run):
    records = read_metrics(cli_run["checkpoint"] / "metrics.jsonl")
    losses = [(r.stage, r.step) for r in records if "loss" in r.metrics]
    assert losses == [("sft", 1), ("sft", 2)]


@pytest.mark.slow
def test_it_records_validation_f1_with_the_current_weights(cli_run):
    records = read_metrics(cli_run["checkpoint"] / "metrics.jsonl")
    validation = [r for r in records if "val_f1" in r.metrics]
    assert [r.step for r in validation] == [2]
    assert 0.0 <= validation[0].metrics["val_f1"] <= 1.0


@pytest.mark.slow
def test_it_writes_the_lineage_beside_the_weights(cli_run, tiny_model_path):
    lineage = load_lineage(cli_run["checkpoint"])
    assert (lineage.stage, lineage.base_model) == ("sft", str(tiny_model_path))
    assert lineage.dataset["rows"] == 2 and lineage.dataset["sources"]["smoke_tasks"] == ["CV"]
    assert len(lineage.dataset_version) == 16
    assert lineage.config["SpecvetSFTConfig"]["max_steps"] == 2
    expected_sha = hashlib.sha256(load_chat_template().encode()).hexdigest()
    assert lineage.chat_template_sha256 == expected_sha
    assert "loss" in lineage.metrics


@pytest.mark.slow
def test_it_records_the_spectra_it_trained_on_beside_the_weights(cli_run, tiny_model_path):
    """What an evaluation of the checkpoint must not score (issue 33 item 6)."""
    trajectories, _ = collect_trajectories(parse_args(cpu_args(tiny_model_path, Path("x")))[1])
    expected = SplitMembers.of_trajectories("SFT data", trajectories)
    trained = load_training_spectra(cli_run["checkpoint"])
    assert trained is not None and trained.object_ids
    assert (trained.object_ids, trained.content_hashes) == (
        expected.object_ids,
        expected.content_hashes,
    )


@pytest.mark.slow
def test_it_saves_the_project_chat_template_and_stock_processor_class(cli_run):
    checkpoint = cli_run["checkpoint"]
    assert (checkpoint / "chat_template.jinja").read_text(encoding="utf-8") == load_chat_template()
    assert '"processor_class": "Qwen2_5_VLProcessor"' in (
        checkpoint / "processor_config.json"
    ).read_text(encoding="utf-8")


@pytest.mark.slow
def test_it_saves_a_checkpoint_the_transformers_policy_generates_with(cli_run, two_step_trajectory):
    policy = build_policy(
        {
            "kind": "transformers",
            "model_path": str(cli_run["checkpoint"]),
            "sampling": {"max_new_tokens": 3},
        }
    )
    text = policy.generate(to_messages(two_step_trajectory)[:2])
    assert isinstance(text, str) and policy.last_usage["completion_tokens"] <= 3


# --- LoRA ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_run(tiny_model_path, tmp_path_factory, cv_spectrum) -> dict[str, Any]:
    from tests.training.conftest import scripted_trajectory

    output_dir = tmp_path_factory.mktemp("sft_lora")
    args = parse_args(
        cpu_args(tiny_model_path, output_dir, "--use_lora", "true", "--max_steps", "1")
    )
    trajectory = scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_YES])
    run = build_sft_run(*args, trajectories=[trajectory])
    trainable = [n for n, p in run.trainer.model.named_parameters() if p.requires_grad]
    run.trainer.train()
    return {"trainable": trainable, "checkpoint": save_sft_run(run, *args)}


@pytest.mark.slow
def test_it_adapts_only_lora_weights_outside_the_vision_tower(lora_run):
    trainable = lora_run["trainable"]
    assert trainable and all("lora_" in n and "visual" not in n for n in trainable)
    assert any("q_proj" in n for n in trainable) and any("down_proj" in n for n in trainable)


@pytest.mark.slow
def test_it_saves_lora_runs_as_merged_plain_weights(lora_run, tiny_model_path):
    before, after = weights(tiny_model_path), weights(lora_run["checkpoint"])
    assert sorted(after) == sorted(before)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(before[name], after[name])


@pytest.mark.slow
def test_it_embeds_the_base_lineage_of_a_registered_checkpoint(cli_run):
    lineage = new_lineage(
        stage="grpo",
        base_model=cli_run["checkpoint"],
        dataset_version="0" * 16,
        dataset={},
        config={},
    )
    assert lineage.base_lineage == load_lineage(cli_run["checkpoint"]).to_dict()


def test_it_reports_a_checkpoint_that_was_never_registered(tiny_model_path):
    with pytest.raises(LineageError, match="was not registered"):
        load_lineage(tiny_model_path)


def test_it_requires_a_local_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a local checkpoint directory"):
        build_sft_run(
            ModelArguments(model_name_or_path=str(tmp_path / "missing")),
            DataArguments(smoke_tasks=["CV"]),
            RunArguments(),
            parse_args(["--config", str(CPU_CONFIG), "--output_dir", str(tmp_path)])[3],
        )
