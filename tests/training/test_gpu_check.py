"""training.gpu_check: the whole check on the tiny model on the CPU, its refusal without a GPU,
its verdicts on figures that pass and fail, and a stage that raises failing only its own
verdicts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from training import gpu_check
from training.gpu_check import (
    FAIL,
    GRPO_VERDICTS,
    NOTE,
    PASS,
    PRECISION_VERDICTS,
    PRESETS,
    WARMUP_VERDICT,
    Check,
    grpo_args,
    judge_grpo,
    judge_precision,
    main,
    sft_args,
)

ALL_VERDICTS = [
    "model_built",
    *PRECISION_VERDICTS,
    WARMUP_VERDICT,
    *GRPO_VERDICTS,
    "tokens_per_s_and_peak_memory",
]


def gpu_check_state(tmp_path: Path) -> Check:
    return Check(preset=PRESETS["gpu"], work=tmp_path, out=tmp_path / "report.json", cuda=True)


@pytest.mark.slow
def test_it_runs_every_stage_of_the_tiny_preset_on_the_cpu(tmp_path, capsys):
    """The whole code path of the GPU check, on the tiny model: build, precision, warm-up with a
    greedy inspection, GRPO with the tool environment, speed; one line per verdict, JSON out."""
    out = tmp_path / "out" / "gpu_check.json"
    status = main(["--tiny", "--out", str(out), "--work", str(tmp_path / "work")])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    verdicts = {row["name"]: row for row in report["verdicts"]}
    assert status == 0 and report["passed"] is True
    assert list(verdicts) == ALL_VERDICTS
    judged = [name for name in ALL_VERDICTS if name not in (WARMUP_VERDICT, GRPO_VERDICTS[1])]
    assert all(verdicts[name]["status"] == PASS for name in judged)
    # A 2-layer tiny model does not learn the call format in two steps: reported, not judged.
    assert verdicts[WARMUP_VERDICT]["status"] == verdicts[GRPO_VERDICTS[1]]["status"] == NOTE
    for name in ALL_VERDICTS:
        assert re.search(rf"^(PASS|NOTE) {name}: \S", printed, re.MULTILINE)
    assert re.search(r"^\[\d\d:\d\d:\d\d \+ *\d+\.\ds\] precision", printed, re.MULTILINE)

    figures = report["figures"]
    fp32, bf16 = figures["precision"]["fp32_master"], figures["precision"]["pure_bf16"]
    assert fp32["weights_dtype"] == "torch.float32" and fp32["moved_share"] > 0.5
    assert bf16["weights_dtype"] == "torch.bfloat16" and bf16["moved_share"] < 0.1
    assert fp32["norms_moved"] == fp32["norms"] > 0 and bf16["norms_moved"] == 0
    assert figures["warmup"]["steps"] == 2 and figures["warmup"]["inspection"]["turns"] >= 1
    steps = figures["grpo"]["steps"]
    assert len(steps) == 1 and {"reward", "tool_calls_mean", "turns_mean"} <= set(steps[0])
    for stage in (fp32, figures["warmup"], figures["grpo"]):
        assert stage["tokens_per_s"] > 0 and stage["memory_estimate_gib"] > 0
    assert (tmp_path / "work" / "warmup" / "model.safetensors").exists()


def test_it_refuses_to_run_the_full_check_without_a_gpu(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status = main(["--out", str(tmp_path / "report.json")])
    error = capsys.readouterr().err
    assert status == 2
    assert "needs a CUDA GPU" in error and "--tiny" in error
    assert not (tmp_path / "report.json").exists()


def test_it_passes_precision_only_when_fp32_moves_weights_and_bf16_does_not(tmp_path):
    check = gpu_check_state(tmp_path)
    fp32 = {"weights_dtype": "torch.float32", "moved_share": 0.97, "norms_moved": 49}
    fp32.update(norms=49, compute="bf16 autocast")
    bf16 = {"weights_dtype": "torch.bfloat16", "moved_share": 0.021, "norms_moved": 0, "norms": 49}
    judge_precision(check, fp32, bf16)
    assert [v.status for v in check.verdicts] == [PASS, PASS]
    assert "97.00% of language-model weights moved" in check.verdicts[0].figure

    check = gpu_check_state(tmp_path)
    judge_precision(check, {**fp32, "norms_moved": 48}, {**bf16, "moved_share": 0.4})
    assert [v.status for v in check.verdicts] == [FAIL, FAIL]
    assert not check.passed


def grpo_step(**values: float) -> dict[str, Any]:
    return {
        "reward": 0.3,
        "turns_mean": 2.0,
        "format_ok_rate": 0.5,
        "tool_calls_mean": 0.9,
        **values,
    }


def test_it_judges_grpo_tool_calls_at_every_step_on_the_gpu_preset(tmp_path):
    check = gpu_check_state(tmp_path)
    judge_grpo(check, [grpo_step(), grpo_step(tool_calls_mean=0.5), grpo_step()])
    assert [v.status for v in check.verdicts] == [PASS, PASS]
    assert "tool_calls_mean [0.9, 0.5, 0.9]" in check.verdicts[1].figure

    check = gpu_check_state(tmp_path)
    judge_grpo(check, [grpo_step(), grpo_step(tool_calls_mean=0.0), grpo_step()])
    assert [v.status for v in check.verdicts] == [PASS, FAIL]

    check = gpu_check_state(tmp_path)
    missing = grpo_step()
    del missing["turns_mean"]
    judge_grpo(check, [grpo_step(), missing, grpo_step(reward=float("nan"))])
    assert check.verdicts[0].status == FAIL and "missing ['turns_mean']" in check.verdicts[0].figure

    check = gpu_check_state(tmp_path)
    judge_grpo(check, [grpo_step(), grpo_step()])  # a step short of the preset's 3
    assert check.verdicts[0].status == FAIL and check.verdicts[0].figure.startswith("2/3 steps")


def test_it_fails_a_raising_stage_and_goes_on_to_the_next(tmp_path, monkeypatch, capsys):
    """An error fails that stage's verdicts with the error; the later stages still run."""
    ran: list[str] = []

    def build(check: Check) -> Path:
        check.figures["build"] = {"parameters": 1}
        check.judge("model_built", True, "stand-in")
        return tmp_path / "model"

    def precision_run(check: Check, model: Path, *, pure_bf16: bool) -> dict[str, Any]:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(gpu_check, "stage_build", build)
    monkeypatch.setattr(gpu_check, "precision_run", precision_run)
    monkeypatch.setattr(gpu_check, "stage_warmup", lambda check, model: ran.append("warmup"))
    monkeypatch.setattr(gpu_check, "stage_grpo", lambda check, model: ran.append(model.name))
    check = gpu_check.run_check(
        PRESETS["gpu"], out=tmp_path / "report.json", work=tmp_path, cuda=False
    )
    printed = capsys.readouterr().out
    statuses = {v.name: v.status for v in check.verdicts}
    assert statuses[PRECISION_VERDICTS[0]] == statuses[PRECISION_VERDICTS[1]] == FAIL
    assert ran == ["warmup", "model"]  # GRPO starts from the random model when warm-up failed
    assert statuses["tokens_per_s_and_peak_memory"] == FAIL  # nothing was measured
    assert f"FAIL {PRECISION_VERDICTS[0]}: stage raised RuntimeError: CUDA out of memory" in printed
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["passed"] is False and len(saved["verdicts"]) == len(check.verdicts)


def test_it_gives_the_gpu_runs_the_recipes_configs_with_the_checks_settings(tmp_path):
    """The arguments of the GPU runs, parsed here since only a GPU host trains with them: the
    GPU configs, HF generate, 1,024 completion tokens for a tool call, 2 tool rounds."""
    check = gpu_check_state(tmp_path)
    model = tmp_path / "model"
    cpu = ("--use_cpu", "true")  # only so that bf16 parses here, where there is no GPU
    sft = sft_args(check, model, "precision", "--max_steps", "3", "--learning_rate", "1e-6", *cpu)[
        3
    ]
    assert (sft.bf16, sft.gradient_checkpointing) == (True, True)
    assert (sft.max_steps, sft.learning_rate, sft.assistant_only_loss) == (3, 1e-6, True)
    assert sft.output_dir == str(tmp_path / "precision") and sft.save_strategy == "no"
    model_args, data_args, run_args, grpo = grpo_args(check, model, *cpu)
    assert model_args.freeze_vision_tower and model_args.model_name_or_path == str(model)
    assert (grpo.use_vllm, grpo.beta, grpo.bf16, grpo.loss_type) == (False, 0.0, True, "dapo")
    assert (grpo.num_generations, grpo.per_device_train_batch_size, grpo.max_steps) == (8, 16, 3)
    assert (grpo.max_completion_length, grpo.max_tool_calling_iterations) == (1024, 2)
    assert data_args.specvi_mini_tasks == ["CV"] and run_args.validation_every_steps > 1000
