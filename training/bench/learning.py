"""Learning that depends on the picture: SFT and GRPO on a tiny Qwen2.5-VL learn an answer that
is only in the spectrum plot, and the controls that must not learn stay at chance (issue 33).

**The task.** Every prompt is the same short system prompt, the plot I0 that the project's own
tool renders (``agent.tool.SpectralVisualizationTool.render_full``) and the same one-line
question. Nothing in the text differs between rows, so the answer can only come from the image.
Labels are a function of the spectrum alone: the generator is given the class and draws the
feature (``picture_spectrum``); continuum slope, noise and line widths are random in both
classes. Rows alternate YES, NO, so every GRPO step (an even number of prompts, TRL's sampler
with ``shuffle_dataset=False``) is 50/50 and a constant answer earns exactly chance.

- ``visible`` (item 1): YES is strong broad H-alpha emission, NO none. I0 shows it.
- ``zoom`` (item 2): both classes share a towering H-beta line that sets the full view's scale;
  YES has a weak narrow H-alpha *emission*, NO the same line in *absorption*. In I0 (downscaled
  to 140x84 by the tiny model's image processor) the two are the same picture; a zoom on
  6500-6630 A (the agent's tool, asked for by the model) shows a peak or a trough.

**The stages.** SFT (``training.sft``: assistant-only loss, frozen vision tower, fp32 master
weights over the bf16 checkpoint) on demonstrations answering the label; for ``zoom`` the
demonstration first calls the tool on the H-alpha window. GRPO (``training.grpo``: TRL's
``GRPOTrainer`` with the agent's environment and tool, eq.-3 reward) starts from a *format*
checkpoint: SFT on the shuffled-label rows (every picture once answered YES, once NO), which
answers in the format (and, for ``zoom``, calls the tool) and says each answer with probability
about 1/2 whatever the picture, so every GRPO group explores both. The reward is the only
teacher.

**What is measured**, on held-out spectra (their own generator stream, never in training), is
(a) greedy accuracy: the model answers through the agent's own inspection loop
(``agent.rollout.inspect``, tool calls run for real) with greedy decoding, and (b) P(true): the
mean probability of the true answer at the decision token (``answer_probability``; the accuracy
the model has when it samples). Both before and after training. Weight movement is not
evidence (a constant reward moves AdamW's weights through one-ulp advantages), and neither is
greedy accuracy alone: greedy decoding of a model that says each answer with probability ~1/2
follows the smallest picture-dependent tilt, so it lands anywhere from 0 to 1 (the format
checkpoint: 0.12 greedy on seed 0). Learnt means P(true) under ``p_threshold`` before, greedy
>= ``threshold`` and P(true) above 1/2 after (the sign; SFT's margin is small, see the guide). Controls, each beside the positive run:

- ``swapped``: the trained model on the held-out rows with the other class's spectrum: accuracy
  must flip (<= 1 - threshold);
- ``blank``: training and evaluation with a blank I0: chance;
- ``shuffled``: every picture twice, labelled YES once and NO once, so no function of the picture
  predicts the label (for SFT this *is* the format checkpoint; for GRPO both copies of a picture
  are in the same step, so their rewards pull opposite ways); scored against the true labels.
  A permutation of the labels, or half of each class relabelled, is no control: each picture
  keeps one label, 80 steps memorise the 32 pairs, and the memorised map generalises through
  the pictures' one feature with a sign set by chance (held-out 0.12, 0.16, 1.00 on seeds 0-2);
- ``constant_reward``: GRPO whose reward is -0.2 for every rollout, what an untrained model
  earns: chance;
- ``tool_off`` (``zoom``): the same GRPO run with the tool switched off (the environment answers
  every call with the disabled notice, evaluation runs with ``use_tool=False``): chance.

A control holds on a seed when its P(true) stays under ``p_threshold``; its greedy accuracy is
printed beside it and judged across seeds (``right_on_every_seed``: a control at
``threshold`` on every seed fails). Swapped must flip (greedy <= 1 - ``threshold``, P(true)
under 1/2).

```bash
OMP_NUM_THREADS=1 python -m training.bench.learning --seeds 0 1 2   # item 1, CPU, all controls
python -m training.bench.learning --stages grpo --seeds 0 --set grpo_lr=1e-3 temperature=0.5
python -m training.bench.learning --variant zoom --preset zoom_cpu  # item 2 (see the note)
python -m training.bench.learning --variant zoom --preset gpu --device cuda
```

``learning_check(device=..., preset=..., variant=...)`` is the same run as a function returning a
result dict with a ``verdicts`` map.

Status (figures and the exact commands in docs/guides/ml-engineer.md, "Shown to learn from the
picture"): on 2 CPU cores SFT learns ``visible`` with every control held; GRPO on the default
tiny model (weights of std 0.02) has not learnt ``visible`` (rollout accuracy flat at ~0.5 over
every setting tried, or a collapse), and ``zoom`` learns neither way; both are left to the
device: ``bash training/gpu_check.sh learning``. The tenth GRPO setting (AdamW 2e-3, beta 0.1,
temperature 1, 8 prompts x 8 rollouts, default weights) was stable (format intact, KL <= 0.053)
and flat: rollout accuracy 0.48 -> 0.47, reward 0.28 -> 0.27,
over 39 steps (stopped at the 40-minute CPU budget). Why: not a
broken image path (``tests/training/bench/test_grpo_image_path.py``: TRL's loss forward gets
each rollout's own pixels, with a gradient through them), but a weak one: with the label also
in the prompt text the same GRPO learns in ~30 steps (``training.bench.grpo_diagnosis``).
Preset ``grpo_cpu`` (random weights of std 0.1, so the frozen tower shows the picture ~30x more
strongly; AdamW 1e-3, beta 0.1, 16 prompts x 8 rollouts, 70 steps) learns it on seeds 0, 1 and 2
(2026-11-29): held-out greedy / P(true) 1.00 / 0.998, 1.00 / 0.999, 0.97 / 0.969, swapped 0.00,
0.00, 0.03. Why the earlier preset (2e-3, 8 x 4, 60 steps) learnt seed 0 only: with groups of 4
the one-token answer's bias tipped to NO within 3 steps on seeds 1 and 2 (groups without reward
variance 0.25, 0.75, 0.62, 1.00 over steps 1-4; NO is absorbing); groups of 8 kept both answers,
but at 2e-3 three of six runs fell to NO after learning. Blank, shuffled and constant reward
held at chance on seeds 0, 1 and 2 at this preset (P(true) 0.498-0.500; guide).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from training.bench.picture_task import (  # noqa: F401 - the benchmark's public names
    ANSWER_PREFIX,
    GRID,
    H_ALPHA,
    H_BETA,
    QUESTION,
    SYSTEM,
    SYSTEM_TOOL,
    TASK,
    VARIANTS,
    ZOOM_WINDOW,
    GreedyPolicy,
    Item,
    _ProbePolicy,
    answer_probability,
    answer_turn,
    blank_png,
    demonstrations,
    greedy_accuracy,
    opening,
    picture_items,
    picture_spectrum,
    shuffled_labels,
    swapped,
    tool_budget,
    tool_call_turn,
)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
STAGE_CONTROLS = {
    "sft": ("swapped", "blank", "shuffled"),
    "grpo": ("swapped", "blank", "shuffled", "constant_reward", "tool_off"),
}
UNTRAINED_REWARD = -0.2  # eq. 3 for a rollout with no valid answer and a bad format


@dataclass(frozen=True)
class PictureSettings:
    variant: str = "visible"
    hidden_size: int = 64
    num_attention_heads: int = 2
    # Std of the tiny model's random weights; 0: transformers' default (0.02). At 0.1 the frozen
    # random vision tower separates the classes by ~30x more (GRPO learns the picture on CPU).
    initializer_range: float = 0.0
    train_items: int = 32
    eval_items: int = 32
    sft_steps: int = 80
    sft_lr: float = 1e-2
    sft_batch: int = 8
    format_steps: int = 80
    grpo_steps: int = 40
    grpo_lr: float = 2e-3
    grpo_optim: str = "adamw_torch"
    grpo_beta: float = 0.0
    grpo_adam_epsilon: float = 1e-8
    num_generations: int = 4
    prompts_per_step: int = 8  # even: half YES, half NO in every step
    temperature: float = 1.0
    max_completion_length: int = 48
    max_new_tokens: int = 48  # per turn of the greedy evaluation
    seed: int = 0
    device: str = "cpu"
    # What "learnt" means (``verdicts``):
    threshold: float = 0.85  # greedy accuracy after
    # Mean P(true answer): before training and every control (but swapped) stay under it. It
    # does not judge learning: SFT's 80 steps learn the right sign on every held-out row of
    # seeds 0-2 but a margin of only 0.504-0.53 (ml-engineer guide).
    p_threshold: float = 0.52
    controls: tuple[str, ...] = ("swapped", "blank", "shuffled", "constant_reward", "tool_off")
    stages: tuple[str, ...] = ("sft", "grpo")


PRESETS: dict[str, PictureSettings] = {
    # Item 1 on 2 CPU cores (the figures of the module's note).
    "cpu": PictureSettings(),
    # The suite's test: SFT on item 1 only, fewer held-out rows and steps, two trainings instead
    # of three (593 s under load with three). Kept: swapped (the answer must follow the picture:
    # it flips) and shuffled (no label memorised: P(true) stays ~1/2). Left to the benchmark:
    # blank, which a text leak would fail, but the rows' text is one string (a test checks it),
    # and swapped flipping already shows the answer comes from the picture.
    "test": PictureSettings(
        eval_items=8, sft_steps=64, controls=("swapped", "shuffled"), stages=("sft",),
    ),
    # GRPO on item 1 on 2 CPU cores (ml-engineer guide, "Why seed 1 stayed at 0.50"): a tiny
    # model whose random vision tower shows the picture more strongly, a KL term holding the
    # answer's bias and the format, and groups of 8: with 4 the one-token answer's bias tipped
    # to one word within 3 steps on seeds 1 and 2, a state with no reward variance (absorbing).
    # 16 prompts (the whole 32-row set in two steps) at half the rate for twice the steps: at
    # 2e-3 three of six runs fell to one word after learning; 70 steps, because on the learnt
    # plateau a constant rate lost seed 0 at step 86 (read off the rollout logs, not held-out).
    "grpo_cpu": PictureSettings(
        initializer_range=0.1, grpo_lr=1e-3, grpo_beta=0.1, grpo_steps=70, num_generations=8,
        prompts_per_step=16, stages=("grpo",),
        controls=("swapped", "blank", "shuffled", "constant_reward"),
    ),
    # Item 2 on 2 CPU cores: a tool call, its plot and the answer need >= 600 tokens of room.
    "zoom_cpu": PictureSettings(
        variant="zoom", max_completion_length=640, max_new_tokens=160, grpo_steps=40,
        controls=("swapped", "tool_off"),
    ),
    # Item 2 on one GPU: more rows, steps and controls; the same tiny model (no downloads).
    # Not yet run on a GPU: on 2 CPU cores 80 SFT steps did not learn the zoomed feature.
    "gpu": PictureSettings(
        variant="zoom", train_items=64, eval_items=64, sft_steps=300, format_steps=300,
        grpo_steps=100, max_completion_length=640, max_new_tokens=160, device="cuda",
        # On the CPU lr 2e-3 at temperature 1 broke the format in 4 steps and 1e-2 collapsed to
        # one answer in 3; 1e-3 at temperature 0.5 stayed stable (and flat) for 20 steps.
        grpo_lr=1e-3, temperature=0.5, num_generations=8,
    ),
}  # fmt: skip


# --- the stages --------------------------------------------------------------------------------


def build_picture_model(path: Path, settings: PictureSettings) -> Path:
    """The tiny Qwen2.5-VL (hidden ``settings.hidden_size``), stored in bf16 like the released
    checkpoints, so training goes through the fp32-master-weights plan."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from training.tiny_model import build_tiny_model

    build_tiny_model(
        path, hidden_size=settings.hidden_size, num_attention_heads=settings.num_attention_heads,
        initializer_range=settings.initializer_range or None,
    )  # fmt: skip
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
    model.to(torch.bfloat16).save_pretrained(path)  # type: ignore[arg-type]
    return path


def _device_args(settings: PictureSettings) -> list[str]:
    return ["--use_cpu", "true"] if settings.device == "cpu" else ["--use_cpu", "false"]


def run_sft(
    model: Path,
    output_dir: Path,
    train: Sequence[Item],
    held_out: Sequence[Item],
    settings: PictureSettings,
    *,
    steps: int,
    blank: bool = False,
    evaluate_swapped: bool = False,
    measure_before: bool = True,
) -> dict[str, Any]:
    """SFT through ``training.sft`` on demonstrations of ``train``; held-out greedy accuracy
    before and after (and on the swapped rows); the checkpoint is saved."""
    from training.sft import build_sft_run, parse_args, save_sft_run

    s = settings
    args = parse_args(
        [
            "--config", str(CONFIGS / "sft_cpu_tiny.yaml"), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--max_steps", str(steps),
            "--learning_rate", str(s.sft_lr), "--per_device_train_batch_size", str(s.sft_batch),
            "--lr_scheduler_type", "linear", "--seed", str(s.seed), *_device_args(s),
            # Rows alternate YES, NO: in order, every (even) batch is half and half, so the
            # constant part of the answer's gradient cancels and only the picture is left.
            "--train_sampling_strategy", "sequential",
        ]
    )  # fmt: skip
    run = build_sft_run(*args, trajectories=demonstrations(train, s.variant, blank=blank))
    result = _train(
        run.trainer, run.processor, held_out, s, blank=blank, measure_before=measure_before
    )
    if evaluate_swapped:
        result["swapped"] = greedy_accuracy(run.trainer.model, run.processor, swapped(held_out), s)
    result["checkpoint"] = str(save_sft_run(run, *args))
    (Path(output_dir) / "figures.json").write_text(json.dumps(result, default=str))
    return result


def constant_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """What an untrained model earns on every rollout (no answer, bad format): -0.2."""
    return [UNTRAINED_REWARD] * len(completions)


def run_grpo(
    start: Path,
    output_dir: Path,
    train: Sequence[Item],
    held_out: Sequence[Item],
    settings: PictureSettings,
    *,
    control: str = "none",
    evaluate_swapped: bool = False,
    measure_before: bool = True,
) -> dict[str, Any]:
    """GRPO through ``training.grpo`` (TRL's trainer, the agent's environment and eq.-3 reward)
    from ``start``; ``control`` is none, blank, constant_reward or tool_off (shuffled rows are
    passed in as ``train``)."""
    s = settings
    use_tool, blank = control != "tool_off", control == "blank"
    run = build_picture_grpo(start, output_dir, train, s, control=control)
    result = _train(
        run.trainer, run.processor, held_out, s, blank=blank, use_tool=use_tool,
        measure_before=measure_before,
    )  # fmt: skip
    if evaluate_swapped:
        result["swapped"] = greedy_accuracy(
            run.trainer.model, run.processor, swapped(held_out), s, use_tool=use_tool
        )
    history = run.trainer.state.log_history
    for key in ("reward", "batch_accuracy", "tool_calls_mean"):
        result[key] = [round(e[key], 3) for e in history if key in e]
    (Path(output_dir) / "figures.json").write_text(json.dumps(result, default=str))
    return result


def build_picture_grpo(
    start: Path,
    output_dir: Path,
    train: Sequence[Item],
    settings: PictureSettings,
    *,
    control: str = "none",
) -> Any:
    """The ready ``training.grpo`` run of ``run_grpo``: our prompt on every row, TRL's sampler
    in dataset order (``shuffle_dataset: false``), so each step's prompts are half YES."""
    from training.callbacks import JsonlMetricsSink
    from training.data import LabelledSpectrum
    from training.grpo import build_grpo_run, parse_args

    s = settings
    if s.prompts_per_step % 2 or len(train) % s.prompts_per_step:
        raise ValueError("prompts_per_step must be even and divide train_items (50/50 steps)")
    use_tool = control != "tool_off"
    blank = control == "blank"
    n = s.num_generations
    args = parse_args(
        [
            "--config", str(CONFIGS / "grpo_cpu_tiny.yaml"), "--model_name_or_path", str(start),
            "--output_dir", str(output_dir), "--max_steps", str(s.grpo_steps),
            "--learning_rate", str(s.grpo_lr), "--optim", s.grpo_optim, "--beta", str(s.grpo_beta),
            "--adam_epsilon", str(s.grpo_adam_epsilon),
            "--per_device_train_batch_size", str(n * s.prompts_per_step),
            "--num_generations", str(n), "--max_completion_length", str(s.max_completion_length),
            "--max_tool_calling_iterations", str(max(1, tool_budget(s.variant))), "--shuffle_dataset", "false",
            "--lr_scheduler_type", "constant", "--seed", str(s.seed),
            "--temperature", str(s.temperature), "--use_tool", str(use_tool).lower(),
            *_device_args(s),
        ]
    )  # fmt: skip
    items = [
        LabelledSpectrum(item.spectrum, TASK, item.label, item.spectrum.object_id) for item in train
    ]
    run = build_grpo_run(*args, items=items, sink=JsonlMetricsSink(output_dir / "metrics.jsonl"))
    prompt = _grpo_prompt(s.variant)
    image = _blank_pil() if blank else None
    run.trainer.train_dataset = run.dataset.map(
        lambda row: {"prompt": prompt, **({"images": [image]} if image is not None else {})}
    )
    if control == "constant_reward":
        run.trainer.reward_funcs = [constant_reward]
    return run


def _grpo_prompt(variant: str) -> list[dict[str, Any]]:
    """The GRPO prompt: the same first turn as the demonstrations and the evaluation."""
    system = SYSTEM_TOOL if variant == "zoom" else SYSTEM
    return [
        {"role": "system", "content": [{"type": "text", "text": system}]},
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "text", "text": QUESTION.replace("<image>", "")},
            ],
        },
    ]


def _blank_pil() -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(blank_png())) as image:
        return image.convert("RGB")


def _train(
    trainer: Any,
    processor: Any,
    held_out: Sequence[Item],
    settings: PictureSettings,
    *,
    blank: bool = False,
    use_tool: bool = True,
    measure_before: bool = True,
) -> dict[str, Any]:
    def measure() -> dict[str, float]:
        return greedy_accuracy(
            trainer.model, processor, held_out, settings, blank=blank, use_tool=use_tool
        )

    nan = float("nan")
    before = measure() if measure_before else {"accuracy": nan, "p_true": nan}
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    after = measure()
    return {
        "before": before["accuracy"],
        "after": after["accuracy"],
        "p_before": before["p_true"],
        "p_after": after["p_true"],
        "after_detail": after,
        "train_seconds": round(seconds, 1),
        "dtype": str(next(trainer.model.parameters()).dtype),
    }


# --- the benchmark -----------------------------------------------------------------------------


def run_seed(
    out: Path,
    settings: PictureSettings,
    log: Callable[[str], None] = print,
    *,
    format_from: Path | None = None,
) -> dict:
    """One seed: SFT and GRPO with their controls; every figure is held-out greedy accuracy and
    P(true answer). ``format_from`` reuses a format checkpoint this seed's settings already
    trained (its ``figures.json``) instead of training it again (for tuning GRPO)."""
    s = settings
    out.mkdir(parents=True, exist_ok=True)
    model = build_picture_model(out / "tiny", s)
    train = picture_items(s.train_items, variant=s.variant, seed=s.seed, split="train")
    held_out = picture_items(s.eval_items, variant=s.variant, seed=s.seed, split="eval")
    mixed = shuffled_labels(train, s.seed)
    result: dict[str, Any] = {"seed": s.seed, "variant": s.variant}
    if "sft" in s.stages:
        sft = run_sft(model, out / "sft", train, held_out, s, steps=s.sft_steps,
                      evaluate_swapped="swapped" in s.controls)  # fmt: skip
        controls = {"swapped": _control(sft.pop("swapped"))} if "swapped" in s.controls else {}
        if "blank" in s.controls:
            blank = run_sft(model, out / "sft-blank", train, held_out, s, steps=s.sft_steps,
                            blank=True, measure_before=False)  # fmt: skip
            controls["blank"] = _control(blank["after_detail"])
        if "shuffled" in s.controls:
            # With format_steps == sft_steps this run is also GRPO's format checkpoint.
            shuffled = run_sft(model, out / "format", mixed, held_out, s, steps=s.sft_steps,
                               measure_before=False)  # fmt: skip
            controls["shuffled"] = _control(shuffled["after_detail"])
            if s.format_steps == s.sft_steps:
                result["format"] = shuffled
        sft["controls"] = controls
        result["sft"] = sft
        log(_row("sft", s.seed, sft))
    if "grpo" in s.stages:
        if format_from is not None and "format" not in result:
            result["format"] = json.loads((format_from / "figures.json").read_text())
        if "format" not in result:
            result["format"] = run_sft(
                model, out / "format", mixed, held_out, s, steps=s.format_steps,
                measure_before=False,
            )  # fmt: skip
        start = Path(result["format"]["checkpoint"])
        # GRPO starts where the format SFT ended: its held-out accuracy is GRPO's "before".
        grpo = run_grpo(start, out / "grpo", train, held_out, s, measure_before=False,
                        evaluate_swapped="swapped" in s.controls)  # fmt: skip
        grpo["before"] = result["format"]["after"]
        grpo["p_before"] = result["format"]["p_after"]
        controls = {"swapped": _control(grpo.pop("swapped"))} if "swapped" in s.controls else {}
        for control in ("blank", "shuffled", "constant_reward", "tool_off"):
            if control not in s.controls or (control == "tool_off" and s.variant != "zoom"):
                continue
            rows = mixed if control == "shuffled" else train
            name = "none" if control == "shuffled" else control
            run = run_grpo(start, out / f"grpo-{control}", rows, held_out, s, control=name,
                           measure_before=False)  # fmt: skip
            controls[control] = _control(run["after_detail"])
            controls[control]["batch_accuracy"] = run["batch_accuracy"]
        grpo["controls"] = controls
        result["grpo"] = grpo
        log(_row("grpo", s.seed, grpo))
    result["verdicts"] = verdicts(result, s)
    return result


def _control(measured: dict[str, Any]) -> dict[str, Any]:
    return {"accuracy": measured["accuracy"], "p_true": measured["p_true"]}


def verdicts(result: dict[str, Any], settings: PictureSettings) -> dict[str, bool]:
    """Per stage and seed: learnt (P(true answer) under p_threshold before; greedy accuracy >=
    threshold and P(true answer) above 1/2 after) and each control held. Swapped images must
    flip the answer (greedy <= 1 - threshold, P(true) under 1/2); the others must not become
    decisive, P(true) < p_threshold. Their greedy accuracy cannot decide on one seed, since
    greedy decoding of a model that says each answer with probability ~1/2 lands anywhere from
    0 to 1 (``answer_probability``); ``right_on_every_seed`` judges it across seeds."""
    s = settings
    out: dict[str, bool] = {}
    for stage in ("sft", "grpo"):
        if stage not in result:
            continue
        figures = result[stage]
        out[f"{stage}_learnt"] = (
            figures["p_before"] < s.p_threshold
            and figures["after"] >= s.threshold
            and figures["p_after"] > 0.5
        )
        for control, measured in figures["controls"].items():
            if control == "swapped":
                held = measured["accuracy"] <= 1.0 - s.threshold and measured["p_true"] < 0.5
            else:
                held = measured["p_true"] < s.p_threshold
            out[f"{stage}_{control}_held"] = held
    if "grpo" in result and s.variant == "zoom":
        calls = result["grpo"].get("tool_calls_mean", [])
        out["grpo_tool_calls_sustained"] = bool(calls) and min(calls) > 0
    return out


def _row(stage: str, seed: int, figures: dict[str, Any]) -> str:
    controls = "  ".join(
        f"{name} {m['accuracy']:.2f}/{m['p_true']:.2f}" for name, m in figures["controls"].items()
    )
    return (
        f"{stage:5s} seed {seed}: held-out greedy accuracy / P(true) "
        f"{figures['before']:.2f}/{figures['p_before']:.2f} -> "
        f"{figures['after']:.2f}/{figures['p_after']:.2f}   controls: {controls or '-'}   "
        f"({figures['train_seconds']}s)"
    )


def run_benchmark(
    out: Path,
    settings: PictureSettings,
    seeds: Sequence[int],
    log: Callable[[str], None] = print,
    format_from: Path | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    runs = [
        run_seed(out / f"seed{seed}", replace(settings, seed=seed), log, format_from=format_from)
        for seed in seeds
    ]
    summary: dict[str, Any] = {}
    for stage in ("sft", "grpo"):
        afters = [run[stage]["after"] for run in runs if stage in run]
        if afters:
            summary[stage] = {
                "after_min": min(afters),
                "after_mean": round(sum(afters) / len(afters), 3),
                "margin_over_threshold": round(min(afters) - settings.threshold, 3),
            }
    failed = sorted({name for run in runs for name, ok in run["verdicts"].items() if not ok})
    failed += right_on_every_seed(runs, settings)
    return {
        "settings": asdict(settings),
        "seeds": list(seeds),
        "runs": runs,
        "summary": summary,
        "failed": failed,
        "ok": not failed,
        "seconds": round(time.perf_counter() - started, 1),
    }


def right_on_every_seed(runs: Sequence[dict[str, Any]], settings: PictureSettings) -> list[str]:
    """The controls whose greedy accuracy reached ``threshold`` on every one of two or more
    seeds. One seed cannot judge a control's greedy accuracy (an indifferent model's greedy
    answers follow a picture-dependent tilt whose sign is chance); across seeds that sign is
    right on every seed with probability 1/2 per seed, as the learnt stages are (SFT: 1.00 on
    seeds 0-2), so a control right on all of them has learnt the picture."""
    if len(runs) < 2:
        return []
    failed = []
    for stage in ("sft", "grpo"):
        names = {n for run in runs if stage in run for n in run[stage]["controls"]} - {"swapped"}
        for name in sorted(names):
            scores = [run[stage]["controls"][name]["accuracy"] for run in runs if stage in run]
            if len(scores) == len(runs) and min(scores) >= settings.threshold:
                failed.append(f"{stage}_{name}_right_on_every_seed")
    return failed


def learning_check(
    *,
    device: str = "cpu",
    preset: str = "cpu",
    variant: str | None = None,
    seeds: Sequence[int] = (0,),
    out: Path | None = None,
    log: Callable[[str], None] = print,
    **overrides: Any,
) -> dict[str, Any]:
    """The benchmark as a function (for ``training.gpu_check``): ``preset`` from ``PRESETS``,
    on ``device``, any ``PictureSettings`` field overridden by keyword (``grpo_steps=20``,
    ``controls=("tool_off",)``); returns the result dict: ``runs`` (per seed: ``sft`` and
    ``grpo`` with ``before``, ``after``, ``controls`` and, for GRPO, the logged ``reward``,
    ``batch_accuracy`` and ``tool_calls_mean`` per step; ``verdicts``), ``summary``, ``failed``
    (the verdicts that failed) and ``ok``."""
    import tempfile

    settings = replace(PRESETS[preset], device=device, **overrides)
    if variant is not None:
        settings = replace(settings, variant=variant)
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="specvet-learning-"))
    return run_benchmark(out, settings, seeds, log)


def _field_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set`` values, each converted to its field's type; an unknown field or a bad value is
    refused naming it."""
    from dataclasses import fields

    types = {f.name: type(getattr(PictureSettings(), f.name)) for f in fields(PictureSettings)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in types or not value or types[name] is tuple:
            raise SystemExit(
                f"--set {pair!r}: expected FIELD=VALUE with FIELD one of "
                f"{sorted(k for k, t in types.items() if t is not tuple)}"
            )
        try:
            out[name] = types[name](value)
        except ValueError as error:
            raise SystemExit(f"--set {pair!r}: {error}") from None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/specvet-learning"))
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--variant", choices=VARIANTS, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sft-steps", type=int, default=None)
    parser.add_argument("--grpo-steps", type=int, default=None)
    parser.add_argument("--stages", nargs="+", choices=("sft", "grpo"), default=None)
    parser.add_argument("--controls", nargs="*", default=None)
    parser.add_argument(
        "--format-from", type=Path, default=None,
        help="a format checkpoint directory of an earlier run of the same seed and settings "
        "(GRPO tuning: skips the format SFT)",
    )  # fmt: skip
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="FIELD=VALUE",
        help="override any PictureSettings field (grpo_lr=3e-4 temperature=0.7)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (1: the tiny model gains nothing from more, and on a shared "
        "machine spinning threads made every step 5 to 15 times slower)",
    )  # fmt: skip
    options = parser.parse_args(argv)
    if options.threads:
        import torch

        torch.set_num_threads(options.threads)
    settings = PRESETS[options.preset]
    overrides = {
        "variant": options.variant, "device": options.device, "sft_steps": options.sft_steps,
        "grpo_steps": options.grpo_steps,
        "stages": tuple(options.stages) if options.stages else None,
        "controls": tuple(options.controls) if options.controls is not None else None,
    }  # fmt: skip
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    settings = replace(settings, **_field_overrides(options.set))
    result = run_benchmark(options.out, settings, options.seeds, format_from=options.format_from)
    (options.out / "result.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result["summary"]))
    print("verdict:", "learnt, controls held" if result["ok"] else f"FAILED {result['failed']}")
    return result


if __name__ == "__main__":
    raise SystemExit(0 if main()["ok"] else 1)
