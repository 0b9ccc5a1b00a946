"""One GPU check of the training recipe with verdicts: ``python -m training.gpu_check``.

No weights are downloaded: a random-initialised Qwen2.5-VL of 0.51 B parameters is built
offline (``training.gpu_smoke`` size ``0.5b``: Qwen2.5-0.5B's language model, hidden 896, 24
layers, the real 151,936-entry vocabulary with a tied head, and a 4-layer vision tower) with the
byte-level tokenizer and image processor of ``training.tiny_model``, stored in bf16 like the
released checkpoints. Then, through the project's own ``training.sft`` and ``training.grpo``:

1. **precision**: SFT steps at lr 1e-6 on the bf16 checkpoint, once with the precision plan's
   fp32 master weights (bf16 autocast) and once with the weights cast to bf16 before training
   (pure bf16, the bug of issue 24). fp32 master must move most language-model weights and every
   norm; pure bf16 must move almost none (an AdamW step of about 1e-6 is below half a bf16 ulp of
   nearly every weight: norms sit at 1.0, weights near 0.02).
2. **warm-up**: a random model rarely writes a valid tool call, so SFT first teaches the format
   on the scripted two-turn demonstrations of ``training.data.smoke_trajectories`` (zoom into
   H-alpha, the plot comes back, answer) at lr 3e-4 until the loss is at most 0.01 (at most
   150 steps or 120 s). The verdict is a greedy inspection through ``agent.rollout.inspect``
   that calls the tool.
3. **GRPO** from the warm-up checkpoint with the environment and real tool calls (HF
   ``generate``, ``max_completion_length`` 1024, 2 tool rounds, 8 rollouts of 2 prompts a
   step): every step must run with a finite reward and log ``reward``, ``tool_calls_mean``,
   ``turns_mean`` and ``format_ok_rate``, and ``tool_calls_mean`` must stay above 0 at every
   step. What this shows is the tool loop, reward and metrics working on a GPU with a model that
   calls the tool, not learning: the warm-up answers are the scripted label's.
4. **speed and memory**: tokens/s and peak GPU memory of each training stage, beside the memory
   model's estimate for it (``training.memory``).

Each verdict prints one line, ``PASS name: figure`` or ``FAIL name: figure``; a stage that
raises fails its verdicts with the error and the next stage still runs (GRPO then starts from the
random checkpoint). Progress lines carry the time. The figures go to ``--out`` as JSON, rewritten
after every stage so a run stopped at a time limit keeps what it measured. Exit status: 0 when
every verdict passes, 1 when one fails, 2 when refused (no GPU and no ``--tiny``).

```bash
python -m training.gpu_check --out $OUT/gpu_check.json          # one H200: planned at ~5 min
python -m training.gpu_check --tiny --out /tmp/gpu_check.json   # any machine, the tiny model
```

``--tiny`` runs the same stages on the 2-layer tiny model with a handful of steps and short
completions (the test suite runs it on the CPU; about 35 s of CPU time).
``training/gpu_check.sh`` runs this and ``training.gpu_smoke`` at 3B on a device host without
network, carrying the packages its image lacks. There the two tool-call verdicts are printed as
``NOTE`` lines, reported but not judged: a 2-layer hidden-32 model does not learn the call format
in a CPU minute, so judging them would only measure that.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).resolve().parent / "configs"
PASS, FAIL, NOTE = "PASS", "FAIL", "NOTE"
GRPO_METRICS = ("reward", "tool_calls_mean", "turns_mean", "format_ok_rate")
PRECISION_VERDICTS = (
    "precision_fp32_master_moves_weights",
    "precision_pure_bf16_rounds_updates_away",
)
WARMUP_VERDICT = "warmup_greedy_inspection_calls_the_tool"
GRPO_VERDICTS = ("grpo_steps_log_reward_and_tool_metrics", "grpo_rollouts_call_the_tool")
REFUSAL = (
    "training.gpu_check needs a CUDA GPU: it builds a 0.51 B-parameter model and trains it in "
    "bf16 autocast, which would take hours on a CPU. Run it on a GPU host, or add --tiny to run "
    "the same stages on the tiny model here."
)


@dataclass(frozen=True)
class Preset:
    """What one run of the check does; ``gpu`` is the real check, ``tiny`` its CPU rehearsal."""

    name: str
    size: str  # a training.gpu_smoke size
    parameters: tuple[float, float]  # the range the built model's parameter count must fall in
    precision_steps: int
    precision_rows: int
    precision_lr: float
    # fp32 master must move at least this share of the language model's weights, pure bf16 at most
    moved_fp32_min: float
    moved_bf16_max: float
    warmup_rows: int
    warmup_batch: int
    warmup_max_steps: int
    warmup_min_steps: int
    warmup_lr: float
    warmup_lr_warmup_steps: int
    warmup_target_loss: float
    warmup_max_seconds: float  # the warm-up stops here whatever the loss
    inspect_new_tokens: int
    grpo_steps: int
    grpo_generations: int
    grpo_prompts: int
    max_completion_length: int
    max_tool_calls: int
    judge_tool_calls: bool  # False: the tool-call verdicts are reported (NOTE), not judged

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS = {
    "gpu": Preset(
        name="gpu",
        size="0.5b",
        parameters=(0.45e9, 0.56e9),
        precision_steps=3,
        precision_rows=4,
        precision_lr=1e-6,
        moved_fp32_min=0.5,
        moved_bf16_max=0.1,
        warmup_rows=16,
        warmup_batch=4,
        warmup_max_steps=150,
        warmup_min_steps=20,
        warmup_lr=3e-4,
        warmup_lr_warmup_steps=5,
        warmup_target_loss=0.01,
        warmup_max_seconds=120.0,
        inspect_new_tokens=384,
        grpo_steps=3,
        grpo_generations=8,
        grpo_prompts=2,
        max_completion_length=1024,
        max_tool_calls=2,
        judge_tool_calls=True,
    ),
    "tiny": Preset(
        name="tiny",
        size="tiny",
        parameters=(5e4, 5e5),
        precision_steps=1,
        precision_rows=1,
        precision_lr=1e-6,
        moved_fp32_min=0.5,
        moved_bf16_max=0.1,
        warmup_rows=2,
        warmup_batch=1,
        warmup_max_steps=2,
        warmup_min_steps=1,
        warmup_lr=1e-2,
        warmup_lr_warmup_steps=0,
        warmup_target_loss=0.01,
        warmup_max_seconds=120.0,
        inspect_new_tokens=8,
        grpo_steps=1,
        grpo_generations=2,
        grpo_prompts=1,
        max_completion_length=24,
        max_tool_calls=1,
        judge_tool_calls=False,
    ),
}


@dataclass
class Verdict:
    name: str
    status: str  # PASS, FAIL or NOTE
    figure: str

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.figure}"


@dataclass
class Check:
    """The run's state: the figures (the JSON report) and the verdicts so far."""

    preset: Preset
    work: Path
    out: Path
    cuda: bool
    started: float = field(default_factory=time.perf_counter)
    figures: dict[str, Any] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)

    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp} +{time.perf_counter() - self.started:6.1f}s] {message}", flush=True)

    def judge(self, name: str, ok: bool, figure: str, *, judged: bool = True) -> Verdict:
        verdict = Verdict(name, (PASS if ok else FAIL) if judged else NOTE, figure)
        self.verdicts.append(verdict)
        print(verdict.line(), flush=True)
        return verdict

    def fail(self, names: tuple[str, ...], error: BaseException) -> None:
        """Every verdict of a stage that raised fails with the error."""
        text = f"{type(error).__name__}: {error}"[:600]
        for name in names:
            self.judge(name, False, f"stage raised {text}")

    def save(self) -> None:
        report = {
            "preset": self.preset.as_dict(),
            "seconds": round(time.perf_counter() - self.started, 1),
            "figures": self.figures,
            "verdicts": [asdict(verdict) for verdict in self.verdicts],
            "passed": self.passed,
        }
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")

    @property
    def passed(self) -> bool:
        return all(verdict.status != FAIL for verdict in self.verdicts)


# --- measuring -----------------------------------------------------------------------------------


@contextlib.contextmanager
def measured(check: Check, into: dict[str, Any]) -> Iterator[None]:
    """Seconds and peak GPU memory of the block, written into ``into``."""
    import torch

    release()
    if check.cuda:
        torch.cuda.reset_peak_memory_stats()
        # what earlier stages left allocated counts in this stage's peak too
        into["allocated_at_start_gib"] = round(torch.cuda.memory_allocated() / 2**30, 2)
    started = time.perf_counter()
    try:
        yield
    finally:
        if check.cuda:
            torch.cuda.synchronize()
            into["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        into["seconds"] = round(time.perf_counter() - started, 2)


def release() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def tokens_seen(trainer: Any) -> int:
    """Tokens the trainer consumed (TRL's ``num_tokens``: prompts and completions/labels)."""
    seen = [entry["num_tokens"] for entry in trainer.state.log_history if "num_tokens" in entry]
    return int(seen[-1]) if seen else int(trainer.state.num_input_tokens_seen or 0)


def speed(figures: dict[str, Any], tokens: int, seconds: float) -> None:
    figures["tokens"] = tokens
    figures["tokens_per_s"] = round(tokens / seconds, 1) if seconds > 0 else None


def language_weights(model: Any) -> dict[str, Any]:
    """A float copy of every language-model weight (the vision tower is frozen)."""
    return {
        name: parameter.detach().float().clone()
        for name, parameter in model.named_parameters()
        if "visual" not in name
    }


def moved(before: dict[str, Any], model: Any) -> tuple[float, int, int]:
    """Share of the language model's weights whose value changed, and how many of its norm
    weights (tensors) changed out of how many."""
    changed = total = norms = norms_moved = 0
    for name, parameter in model.named_parameters():
        if name not in before:
            continue
        difference = before[name] != parameter.detach().float()
        changed += int(difference.sum())
        total += difference.numel()
        if "norm" in name:
            norms += 1
            norms_moved += int(bool(difference.any()))
    return (changed / total if total else 0.0), norms_moved, norms


# --- the stages ------------------------------------------------------------------------------------


def build_model(check: Check) -> Path:
    """The preset's random checkpoint, stored in bf16, with the tiny tokenizer and processor."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from training.gpu_smoke import build_checkpoint

    path = check.work / "model"
    torch.manual_seed(0)
    build_checkpoint(check.preset.size, path, device="cuda" if check.cuda else "cpu")
    if check.preset.size == "tiny":  # the tiny builder writes float32; store it as released
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path))
        model.to(torch.bfloat16)  # type: ignore[arg-type]
        model.save_pretrained(path)
        del model
    return path


def stage_build(check: Check) -> Path | None:
    from transformers import AutoConfig

    from training.gpu_smoke import environment, parameter_count

    figures: dict[str, Any] = {}
    check.figures["build"] = figures
    check.log(f"building the random {check.preset.size} Qwen2.5-VL")
    try:
        figures["environment"] = environment()
        with measured(check, figures):
            path = build_model(check)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        figures["parameters"] = parameter_count(AutoConfig.from_pretrained(str(path)))
        figures["dtype"] = config.get("dtype") or config.get("torch_dtype")
    except Exception as error:
        check.fail(("model_built",), error)
        return None
    low, high = check.preset.parameters
    ok = low <= figures["parameters"] <= high and figures["dtype"] == "bfloat16"
    check.judge(
        "model_built",
        ok,
        f"{figures['parameters']:,} parameters stored in {figures['dtype']} "
        f"(expected {low:,.0f} to {high:,.0f} in bfloat16), built in {figures['seconds']} s",
    )
    return path


def common_args(check: Check, output_dir: Path) -> list[str]:
    """What every stage's run shares: no saving, no reporting, no validation pass, the seed,
    and on the CPU its settings."""
    device = ["--use_cpu", "true", "--bf16", "false", "--gradient_checkpointing", "false"]
    return [
        "--output_dir", str(output_dir), "--save_strategy", "no", "--report_to", "none",
        "--logging_steps", "1", "--validation_every_steps", "1000000", "--seed", "0",
        *([] if check.cuda else device),
    ]  # fmt: skip


def sft_args(check: Check, model: Path, name: str, *extra: str) -> tuple[Any, ...]:
    """An SFT run's arguments: the recipe's config (``sft_gpu.yaml`` on a GPU) and ``extra``."""
    from training.sft import parse_args

    config = "sft_gpu.yaml" if check.cuda else "sft_cpu_tiny.yaml"
    return parse_args(
        [
            "--config", str(CONFIGS / config), "--model_name_or_path", str(model),
            *common_args(check, check.work / name), "--gradient_accumulation_steps", "1",
            *extra,
        ]
    )  # fmt: skip


def stage_precision(check: Check, model: Path) -> None:
    """fp32 master weights against pure bf16, a few SFT steps at lr 1e-6 (section 1)."""
    figures: dict[str, Any] = {}
    check.figures["precision"] = figures
    try:
        for mode in ("fp32_master", "pure_bf16"):
            check.log(f"precision: {check.preset.precision_steps} SFT steps at lr 1e-6, {mode}")
            figures[mode] = precision_run(check, model, pure_bf16=mode == "pure_bf16")
            check.save()
    except Exception as error:
        check.fail(PRECISION_VERDICTS, error)
        return
    judge_precision(check, figures["fp32_master"], figures["pure_bf16"])


def judge_precision(check: Check, fp32: dict[str, Any], bf16: dict[str, Any]) -> None:
    """fp32 master weights move most weights and every norm; pure bf16 almost none."""
    preset = check.preset
    check.judge(
        PRECISION_VERDICTS[0],
        fp32["weights_dtype"] == "torch.float32"
        and fp32["moved_share"] >= preset.moved_fp32_min
        and fp32["norms_moved"] == fp32["norms"] > 0,
        f"{fp32['moved_share']:.2%} of language-model weights moved (>= "
        f"{preset.moved_fp32_min:.0%} required), {fp32['norms_moved']}/{fp32['norms']} norm "
        f"tensors; weights {fp32['weights_dtype']}, compute {fp32['compute']}",
    )
    check.judge(
        PRECISION_VERDICTS[1],
        bf16["weights_dtype"] == "torch.bfloat16" and bf16["moved_share"] <= preset.moved_bf16_max,
        f"{bf16['moved_share']:.2%} moved (<= {preset.moved_bf16_max:.0%} required), "
        f"{bf16['norms_moved']}/{bf16['norms']} norm tensors; the same steps with the weights "
        "cast to bf16",
    )


def precision_run(check: Check, model: Path, *, pure_bf16: bool) -> dict[str, Any]:
    import torch

    from training.data import smoke_trajectories
    from training.sft import build_sft_run

    preset = check.preset
    name = "precision-bf16" if pure_bf16 else "precision-fp32"
    args = sft_args(
        check, model, name,
        "--max_steps", str(preset.precision_steps),
        "--learning_rate", str(preset.precision_lr),
        "--lr_scheduler_type", "constant", "--warmup_steps", "0",
        "--per_device_train_batch_size", str(preset.precision_rows),
        # the GPU recipe's compute on the CPU too (as tests/training/test_precision.py does)
        "--bf16", "true",
    )  # fmt: skip
    rows = smoke_trajectories(["CV"], samples_per_task=max(2, preset.precision_rows))
    figures: dict[str, Any] = {}
    with measured(check, figures):
        run = build_sft_run(*args, trajectories=rows)
        trainer = run.trainer
        if pure_bf16:
            trainer.model.to(torch.bfloat16)
        figures["weights_dtype"] = str(next(trainer.model.parameters()).dtype)
        figures["compute"] = run.precision.compute if run.precision else None
        figures["memory_estimate_gib"] = round(run.memory.total_gib, 2) if run.memory else None
        figures["memory_estimate"] = run.memory.summary() if run.memory else None
        before = language_weights(trainer.model)
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        share, norms_moved, norms = moved(before, trainer.model)
        speed(figures, tokens_seen(trainer), seconds)
        figures["loss"] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        del before, trainer, run
    figures.update(moved_share=round(share, 4), norms_moved=norms_moved, norms=norms)
    check.log(
        f"  moved {share:.2%}, norms {norms_moved}/{norms}, {figures.get('tokens_per_s')} "
        f"tokens/s, peak {figures.get('peak_gib')} GiB"
    )
    return figures


def stop_at_loss(target: float, min_steps: int, max_seconds: float) -> Any:
    """A trainer callback that ends training once a logged loss is at most ``target`` (after
    ``min_steps``), or ``max_seconds`` after it started."""
    from transformers import TrainerCallback

    started = time.perf_counter()

    class StopAtLoss(TrainerCallback):
        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            loss = (logs or {}).get("loss")
            if loss is not None and state.global_step >= min_steps and loss <= target:
                control.should_training_stop = True
            if time.perf_counter() - started > max_seconds:
                control.should_training_stop = True

    return StopAtLoss()


def stage_warmup(check: Check, model: Path) -> Path | None:
    """SFT on scripted tool-call demonstrations, then a greedy inspection (section 2)."""
    from training.data import smoke_trajectories
    from training.sft import build_sft_run, save_sft_run

    preset = check.preset
    figures: dict[str, Any] = {}
    check.figures["warmup"] = figures
    name = WARMUP_VERDICT
    check.log(
        f"warm-up: SFT on {preset.warmup_rows} tool-call demonstrations, lr {preset.warmup_lr}, "
        f"until loss <= {preset.warmup_target_loss} (at most {preset.warmup_max_steps} steps)"
    )
    try:
        args = sft_args(
            check, model, "warmup",
            "--max_steps", str(preset.warmup_max_steps),
            "--learning_rate", str(preset.warmup_lr),
            "--lr_scheduler_type", "constant_with_warmup",
            "--warmup_steps", str(preset.warmup_lr_warmup_steps),
            "--per_device_train_batch_size", str(preset.warmup_batch),
            # speed over memory here: the precision stage measured the recipe's settings
            "--gradient_checkpointing", "false",
        )  # fmt: skip
        rows = smoke_trajectories(["CV"], samples_per_task=preset.warmup_rows)
        with measured(check, figures):
            run = build_sft_run(*args, trajectories=rows)
            run.trainer.add_callback(
                stop_at_loss(
                    preset.warmup_target_loss, preset.warmup_min_steps, preset.warmup_max_seconds
                )
            )
            started = time.perf_counter()
            run.trainer.train()
            speed(figures, tokens_seen(run.trainer), time.perf_counter() - started)
            losses = [e["loss"] for e in run.trainer.state.log_history if "loss" in e]
            figures.update(
                steps=run.trainer.state.global_step,
                loss_first=losses[0] if losses else None,
                loss_last=losses[-1] if losses else None,
                memory_estimate_gib=round(run.memory.total_gib, 2) if run.memory else None,
            )
            check.log(
                f"  {figures['steps']} steps, loss {figures['loss_first']} -> "
                f"{figures['loss_last']}, {figures['tokens_per_s']} tokens/s"
            )
            figures["inspection"] = greedy_inspection(check, run.trainer.model, run.processor)
            checkpoint = save_sft_run(run, *args)
            del run
    except Exception as error:
        check.fail((name,), error)
        return None
    inspection = figures["inspection"]
    check.judge(
        name,
        inspection["n_tool_calls"] > 0,
        f"greedy inspection made {inspection['n_tool_calls']} tool call(s), answer "
        f"{inspection['prediction']}; first turn {inspection['first_turn']!r}; warm-up "
        f"{figures['steps']} steps, loss {_round(figures['loss_first'])} -> "
        f"{_round(figures['loss_last'])}",
        judged=preset.judge_tool_calls,
    )
    return checkpoint


def greedy_inspection(check: Check, model: Any, processor: Any) -> dict[str, Any]:
    """One greedy episode of the real inspection loop with the warmed-up weights."""
    from agent.inspection_tasks import get_task
    from agent.policies.base import SamplingParams
    from agent.rollout import inspect
    from agent.synthetic import generate_split
    from training.callbacks import InMemoryPolicy

    sample = generate_split("CV", "test", n_pos=1, n_neg=0, seed=11)[0]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=check.preset.inspect_new_tokens)
    was_training = model.training
    model.eval()
    try:
        policy = InMemoryPolicy(model, processor, sampling=sampling)
        trajectory = inspect(sample.spectrum, get_task("CV"), policy, max_tool_calls=1)
    finally:
        model.train(was_training)
    first = trajectory.steps[0].assistant_text if trajectory.steps else ""
    return {
        "n_tool_calls": trajectory.n_tool_calls,
        "turns": len(trajectory.steps),
        "prediction": trajectory.answer.prediction if trajectory.answer else None,
        "stop_reason": trajectory.stop_reason,
        "first_turn": first[:240],
    }


def grpo_args(check: Check, model: Path, *extra: str) -> tuple[Any, ...]:
    """The GRPO run's arguments: the recipe's config (``grpo_gpu.yaml`` on a GPU) with HF
    generate, the preset's steps, rollouts, completion length and tool rounds, no KL term, and
    ``extra``."""
    from training.grpo import parse_args

    preset = check.preset
    batch = preset.grpo_generations * preset.grpo_prompts
    config = "grpo_gpu.yaml" if check.cuda else "grpo_cpu_tiny.yaml"
    return parse_args(
        [
            "--config", str(CONFIGS / config), "--model_name_or_path", str(model),
            *common_args(check, check.work / "grpo"),
            "--use_vllm", "false", "--beta", "0.0",
            "--specvi_mini_tasks", "CV",
            "--specvi_mini_positives", str(preset.grpo_prompts),
            "--specvi_mini_negatives", str(preset.grpo_prompts),
            "--max_steps", str(preset.grpo_steps),
            "--per_device_train_batch_size", str(batch),
            "--gradient_accumulation_steps", "1",
            "--num_generations", str(preset.grpo_generations),
            "--max_completion_length", str(preset.max_completion_length),
            "--max_tool_calling_iterations", str(preset.max_tool_calls),
            *extra,
        ]
    )  # fmt: skip


def stage_grpo(check: Check, model: Path) -> None:
    """GRPO with the environment's real tool calls for a few steps (section 3)."""
    from training.grpo import build_grpo_run

    preset = check.preset
    figures: dict[str, Any] = {"from": model.name}
    check.figures["grpo"] = figures
    check.log(
        f"GRPO: {preset.grpo_steps} steps of {preset.grpo_prompts} prompt(s) x "
        f"{preset.grpo_generations} rollouts, max_completion_length "
        f"{preset.max_completion_length}, {preset.max_tool_calls} tool round(s)"
    )
    try:
        args = grpo_args(check, model)
        with measured(check, figures):
            run = build_grpo_run(*args)
            figures["memory_estimate_gib"] = round(run.memory.total_gib, 2) if run.memory else None
            started = time.perf_counter()
            run.trainer.train()
            speed(figures, tokens_seen(run.trainer), time.perf_counter() - started)
            figures["steps"] = [
                {key: entry[key] for key in sorted(entry) if _loggable(entry[key])}
                for entry in run.trainer.state.log_history
                if "reward" in entry
            ]
            del run
    except Exception as error:
        check.fail(GRPO_VERDICTS, error)
        return
    judge_grpo(check, figures["steps"])


def judge_grpo(check: Check, steps: list[dict[str, Any]]) -> None:
    """Every step logged a finite reward and the tool metrics; the rollouts called the tool
    (``tool_calls_mean`` > 0) at every step."""
    preset = check.preset
    missing = sorted({key for step in steps for key in GRPO_METRICS if key not in step})
    rewards = [step.get("reward") for step in steps]
    finite = all(isinstance(value, float | int) and math.isfinite(value) for value in rewards)
    check.judge(
        GRPO_VERDICTS[0],
        len(steps) == preset.grpo_steps and finite and not missing,
        f"{len(steps)}/{preset.grpo_steps} steps, reward {_series(steps, 'reward')}, "
        f"turns_mean {_series(steps, 'turns_mean')}, format_ok_rate "
        f"{_series(steps, 'format_ok_rate')}, completion length "
        f"{_series(steps, 'completions/mean_length')}"
        + (f"; missing {missing}" if missing else ""),
    )
    calls = [step.get("tool_calls_mean") for step in steps]
    check.judge(
        GRPO_VERDICTS[1],
        bool(calls) and all(isinstance(value, float | int) and value > 0 for value in calls),
        f"tool_calls_mean {_series(steps, 'tool_calls_mean')} per rollout (> 0 at every step "
        f"required), tool_failure_rate {_series(steps, 'tool_failure_rate')}",
        judged=preset.judge_tool_calls,
    )


def judge_speed(check: Check) -> None:
    """Tokens/s and peak memory of each training stage, beside the memory model (section 4)."""
    rows = {
        "sft_fp32_master": check.figures.get("precision", {}).get("fp32_master"),
        "sft_warmup": check.figures.get("warmup"),
        "grpo": check.figures.get("grpo"),
    }
    lines = []
    ok = True
    for stage, row in rows.items():
        if not row or not row.get("tokens_per_s"):
            ok = False
            lines.append(f"{stage} not measured")
            continue
        peak = row.get("peak_gib")
        if check.cuda and not peak:
            ok = False
        lines.append(
            f"{stage} {row['tokens_per_s']:,.0f} tokens/s, peak {peak if peak else '-'} GiB "
            f"(memory model {row.get('memory_estimate_gib', '-')} GiB)"
        )
    check.figures["speed"] = lines
    check.judge("tokens_per_s_and_peak_memory", ok, "; ".join(lines))


def _loggable(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _series(steps: list[dict[str, Any]], key: str) -> str:
    values = [step.get(key) for step in steps]
    return "[" + ", ".join("-" if value is None else f"{value:.3g}" for value in values) + "]"


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


# --- the command ------------------------------------------------------------------------------------


def run_check(preset: Preset, *, out: Path, work: Path, cuda: bool) -> Check:
    """All stages in order; each writes its figures and verdicts whatever the others did."""
    check = Check(preset=preset, work=work, out=out, cuda=cuda)
    check.log(f"gpu_check preset {preset.name} on {'CUDA' if cuda else 'the CPU'}; work in {work}")
    model = stage_build(check)
    check.save()
    if model is None:
        return check
    stage_precision(check, model)
    check.save()
    start = stage_warmup(check, model)
    check.save()
    stage_grpo(check, start or model)
    check.save()
    judge_speed(check)
    check.save()
    return check


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.gpu_check", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("gpu_check.json"),
        help="where the JSON of all figures and verdicts goes (e.g. $OUT/gpu_check.json)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="folder for the checkpoints and trainer output (default: a new temporary folder)",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="the tiny model and a handful of steps (any machine)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    options = make_parser().parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not options.tiny:
        print(REFUSAL, file=sys.stderr, flush=True)
        return 2
    work = options.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    check = run_check(
        PRESETS["tiny" if options.tiny else "gpu"], out=options.out, work=work, cuda=cuda
    )
    failed = [verdict for verdict in check.verdicts if verdict.status == FAIL]
    check.log(
        f"{len(check.verdicts) - len(failed)} of {len(check.verdicts)} verdicts passed or noted, "
        f"{len(failed)} failed; figures in {options.out}"
    )
    print("verdicts:")
    for verdict in check.verdicts:
        print(verdict.line(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
