"""training.gpu_smoke on the CPU: its configs, parameter counts and stage arguments."""

from __future__ import annotations

import pytest

from training import grpo, sft
from training.gpu_smoke import format_report, make_parser, model_config, parameter_count, smoke_plan


@pytest.fixture(scope="module")
def tiny_config(tiny_model_path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(tiny_model_path))


def test_it_defaults_to_both_paper_sizes():
    options = make_parser().parse_args([])
    assert (options.sizes, options.steps) == (["3b", "7b"], 3)


@pytest.mark.parametrize(
    ("size", "low", "high"),
    [("0.5b", 0.51e9, 0.52e9), ("3b", 3.7e9, 3.85e9), ("7b", 8.2e9, 8.35e9)],
)
def test_it_builds_the_architecture_of_each_size(tiny_config, size, low, high):
    config = model_config(size, tiny_config)
    assert low < parameter_count(config) < high
    assert config.image_token_id == tiny_config.image_token_id
    text = config.text_config
    head_dim = text.hidden_size // text.num_attention_heads
    assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2


def test_it_keeps_the_tiny_model_for_cpu_runs(tiny_config):
    assert parameter_count(model_config("tiny", tiny_config)) == parameter_count(tiny_config)


def test_it_runs_the_gpu_configs_with_a_few_steps(tmp_path, tiny_model_path):
    plan = smoke_plan("7b", tiny_model_path, tmp_path, steps=2, use_vllm=False)
    sft_args = sft.parse_args([*plan["sft"], "--use_cpu", "true"])
    grpo_args = grpo.parse_args([*plan["grpo"], "--use_cpu", "true"])
    assert (sft_args[3].max_steps, sft_args[3].assistant_only_loss) == (2, True)
    assert sft_args[1].smoke_tasks == ["CV"]
    assert (grpo_args[3].max_steps, grpo_args[3].use_vllm, grpo_args[3].num_generations) == (
        2,
        False,
        8,
    )
    assert grpo_args[3].output_dir == str(tmp_path / "7b" / "grpo")


def test_it_prints_speed_and_memory_and_names_failures():
    report = {
        "vllm_installed": False,
        "sizes": {
            "7b": {
                "sft": {
                    "ok": True,
                    "seconds": 12.0,
                    "tokens": 2400,
                    "tokens_per_s": 200.0,
                    "peak_gib": 61.5,
                },
                "grpo": {"ok": False, "error": "OutOfMemoryError: CUDA out of memory"},
            }
        },
    }
    text = format_report(report)
    assert "200.0" in text and "61.5" in text and "OutOfMemoryError" in text


def test_it_can_run_the_same_plan_on_the_cpu(tmp_path, tiny_model_path):
    plan = smoke_plan("tiny", tiny_model_path, tmp_path, steps=1, use_vllm=False, cpu=True)
    args = grpo.parse_args(plan["grpo"])[3]
    assert (args.use_cpu, args.bf16, args.gradient_checkpointing) == (True, False, False)


def test_it_bounds_grpo_tool_rounds_when_asked(tmp_path, tiny_model_path):
    plan = smoke_plan("7b", tiny_model_path, tmp_path, steps=1, use_vllm=False, tool_turns=2)
    args = grpo.parse_args([*plan["grpo"], "--use_cpu", "true", "--bf16", "false"])[3]
    assert args.max_tool_calling_iterations == 2
    assert make_parser().parse_args([]).tool_turns == 8


def test_it_refuses_tool_rounds_outside_the_recipe():
    from training.gpu_smoke import main

    with pytest.raises(SystemExit, match="--tool-turns"):
        main(["--tool-turns", "9"])


def test_it_writes_the_report_after_every_stage(tmp_path, tiny_model_path, monkeypatch):
    """A run stopped at a device time limit keeps the stages it finished."""
    import json

    from training import gpu_smoke

    seen: list[dict] = []

    def stage(*_args):
        seen.append(json.loads((tmp_path / "report.json").read_text()))
        if len(seen) == 2:
            raise RuntimeError("CUDA out of memory")
        return 100

    monkeypatch.setattr(gpu_smoke, "build_checkpoint", lambda *a, **k: tiny_model_path)
    monkeypatch.setattr(gpu_smoke, "_train", stage)
    report = gpu_smoke.run_smoke(
        ["tiny"], tmp_path, steps=1, cpu=True, report_path=tmp_path / "report.json"
    )
    assert set(seen[0]["sizes"]["tiny"]) == {"build"}
    assert seen[1]["sizes"]["tiny"]["sft"]["tokens"] == 100
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == report
    assert saved["sizes"]["tiny"]["grpo"] == {
        "ok": False,
        "error": "RuntimeError: CUDA out of memory",
    }
    assert saved["environment"]["trl"] and saved["tool_turns"] == 8
    text = format_report(saved)
    assert "tiny  build" in text and "CUDA out of memory" in text and "trl" in text


def test_it_times_an_inspection_turn_with_the_agents_policy(tmp_path, tiny_model_path):
    """The serving stage on the tiny model: real first turns through agent.rollout.inspect,
    then the same turn for several conversations at once, each generating exactly N tokens."""
    from training import gpu_smoke

    row = gpu_smoke.inspect_serving(
        tiny_model_path, cpu=True, episodes=2, new_tokens=8, batch_sizes=(1, 3)
    )
    assert row["ok"] and row["new_tokens"] == 8
    assert len(row["turn_seconds"]) >= 2 and row["turn_tokens_per_s"] > 0
    assert row["prompt_tokens"] > row["image_tokens"] > 0
    assert [b["batch"] for b in row["batched"]] == [1, 3]
    assert all(b["tokens_per_s"] > 0 and b["prefill_seconds"] > 0 for b in row["batched"])
    text = gpu_smoke.format_report({"vllm_installed": False, "sizes": {"tiny": {"inspect": row}}})
    assert "3 turns at once" in text and "image" in text and "prefill" in text


def test_it_runs_only_the_stages_asked_for(tmp_path, tiny_model_path, monkeypatch):
    from training import gpu_smoke

    monkeypatch.setattr(gpu_smoke, "build_checkpoint", lambda *a, **k: tiny_model_path)
    monkeypatch.setattr(gpu_smoke, "_train", lambda *a: pytest.fail("training was not asked for"))
    monkeypatch.setattr(gpu_smoke, "inspect_serving", lambda *a, **k: {"ok": False, "error": "x"})
    report = gpu_smoke.run_smoke(["tiny"], tmp_path, steps=1, cpu=True, stages=["inspect"])
    assert set(report["sizes"]["tiny"]) == {"build", "inspect"}
    parsed = gpu_smoke.make_parser().parse_args(
        ["--stages", "inspect", "--serve-batches", "1", "64"]
    )
    assert parsed.stages == ["inspect"] and parsed.serve_batches == [1, 64]


def test_it_reports_a_refused_plan_as_refused_with_the_arithmetic(tmp_path, tiny_config):
    """A stage the memory plan refuses before loading is no failure to hide as ``ok: false``
    with a cut message: the row says refused and carries the figures it was refused on."""
    import torch

    from training import gpu_smoke

    model = tmp_path / "config-only-7b"
    config = model_config("7b", tiny_config)
    config.dtype = torch.bfloat16
    config.save_pretrained(model)
    plan = smoke_plan("7b", model, tmp_path, steps=1, use_vllm=False)
    argv = [*plan["grpo"], "--use_cpu", "true", "--gpu_memory_gib", "80"]
    row = gpu_smoke._measure(lambda: gpu_smoke._train(grpo, argv))
    assert row["refused"] is True and row["ok"] is False and "error" not in row
    assert row["reason"].startswith("this run does not fit the GPU")
    assert (
        "weights 30.9 (vision tower 2.5 of it) + gradients 28.4 + AdamW states 56.7 + autocast "
        "bf16 copies 13.2" in row["arithmetic"]
    )
    assert row["arithmetic"].endswith("GiB per GPU of 80.0 GiB")
    assert row["memory"]["total_gib"] > 80 and row["memory"]["autocast_gib"] > 13
    text = format_report({"vllm_installed": False, "sizes": {"7b": {"grpo": row}}})
    assert "7b    grpo           refused by the memory plan before loading: 8.29 B" in text
    assert text.endswith("GiB per GPU of 80.0 GiB")
