"""Why GRPO stays flat on the picture task where SFT learns it (issue 33): the text-hint control.

The picture task (``training.bench.picture_task``) gives the class only in the image. This runs
the same GRPO (``training.grpo`` through ``build_picture_grpo``: TRL's trainer, the agent's
environment, eq.-3 reward, 50/50 steps) in two modes from a format checkpoint each:

- ``image``: the benchmark's rows; the format checkpoint is SFT on the shuffled-label rows
  (every picture answered YES once and NO once), so it answers in format at chance.
- ``hint``: the same rows with the class also written in the prompt text (``(Hint: YES.)``); its
  format checkpoint is SFT on the same shuffled answers with the hint in the prompt, so it too
  answers at chance, having learnt to ignore the hint exactly as the image checkpoint learnt to
  ignore the picture.

If ``hint`` learns and ``image`` does not, GRPO and its settings work and what differs is how
strongly the picture reaches the decision (``tests/training/bench/test_grpo_image_path.py``
checks that it reaches TRL's loss forward at all). Figures: rollout accuracy per step (TRL's
``batch_accuracy``), its first and last quarter, and for ``image`` held-out greedy accuracy and
P(true) through the agent's loop, with the swapped control.

```bash
OMP_NUM_THREADS=1 python -m training.bench.grpo_diagnosis --mode hint --seed 0
OMP_NUM_THREADS=1 python -m training.bench.grpo_diagnosis --mode image --seed 0
```
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from training.bench.learning import (
    CONFIGS,
    PRESETS,
    PictureSettings,
    _device_args,
    _grpo_prompt,
    build_picture_grpo,
    build_picture_model,
    greedy_accuracy,
    run_sft,
    shuffled_labels,
    swapped,
)
from training.bench.picture_task import (
    QUESTION,
    SYSTEM,
    TASK,
    Item,
    _Scripted,
    answer_turn,
    picture_items,
)

MODES = ("image", "hint")


def hint_text(label: str) -> str:
    return f" (Hint: {label}.)"


def hinted(dataset: Any) -> Any:
    """GRPO rows with the row's label written after the question (the image stays)."""
    prompt = _grpo_prompt("visible")

    def add_hint(row: dict[str, Any]) -> dict[str, Any]:
        content = [dict(part) for part in prompt[1]["content"]]
        content[1]["text"] += hint_text(row["ground_truth"])
        return {"prompt": [prompt[0], {**prompt[1], "content": content}]}

    return dataset.map(add_hint)


def hint_format_checkpoint(model: Path, out: Path, train: list[Item], s: PictureSettings) -> Path:
    """SFT on the shuffled answers (each picture YES once, NO once) with the picture's true
    class written in the prompt: a format checkpoint at chance that has seen the hint."""
    from agent.inspection_tasks import get_task
    from agent.rollout import Opening, inspect
    from training.sft import build_sft_run, parse_args, save_sft_run

    task = get_task(TASK)
    trajectories = []
    for item in train:
        first = Opening(user_prompt=QUESTION + hint_text(item.label), system_prompt=SYSTEM)
        for label in ("YES", "NO"):
            script = _Scripted([answer_turn(label)])
            trajectories.append(inspect(item.spectrum, task, script, opening=first))
    args = parse_args(
        [
            "--config", str(CONFIGS / "sft_cpu_tiny.yaml"), "--model_name_or_path", str(model),
            "--output_dir", str(out), "--max_steps", str(s.format_steps),
            "--learning_rate", str(s.sft_lr), "--per_device_train_batch_size", str(s.sft_batch),
            "--lr_scheduler_type", "linear", "--seed", str(s.seed), *_device_args(s),
            "--train_sampling_strategy", "sequential",
        ]
    )  # fmt: skip
    run = build_sft_run(*args, trajectories=trajectories)
    run.trainer.train()
    return save_sft_run(run, *args)


def diagnose(mode: str, out: Path, settings: PictureSettings) -> dict[str, Any]:
    """Format checkpoint, then GRPO in ``mode``; the figures of the module's note."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    s = settings
    model = build_picture_model(out / "tiny", s)
    train = picture_items(s.train_items, variant="visible", seed=s.seed, split="train")
    held_out = picture_items(s.eval_items, variant="visible", seed=s.seed, split="eval")
    if mode == "hint":
        start = hint_format_checkpoint(model, out / "format-hint", train, s)
    else:
        start = Path(
            run_sft(model, out / "format", shuffled_labels(train), held_out, s,
                    steps=s.format_steps, measure_before=False)["checkpoint"]
        )  # fmt: skip
    run = build_picture_grpo(start, out / f"grpo-{mode}", train, s)
    if mode == "hint":
        run.trainer.train_dataset = hinted(run.trainer.train_dataset)
    started = time.perf_counter()
    run.trainer.train()
    history = run.trainer.state.log_history
    accuracy = [round(e["batch_accuracy"], 3) for e in history if "batch_accuracy" in e]
    quarter = max(1, len(accuracy) // 4)
    result: dict[str, Any] = {
        "mode": mode,
        "seed": s.seed,
        "batch_accuracy": accuracy,
        "first_quarter": round(sum(accuracy[:quarter]) / quarter, 3),
        "last_quarter": round(sum(accuracy[-quarter:]) / quarter, 3),
        "kl": [round(e["kl"], 3) for e in history if "kl" in e][-3:],
        "grpo_seconds": round(time.perf_counter() - started, 1),
    }
    if mode == "image":  # the evaluation prompt has no hint: held-out only means something here
        model_, processor = run.trainer.model, run.processor
        result["held_out"] = greedy_accuracy(model_, processor, held_out, s)
        result["swapped"] = greedy_accuracy(model_, processor, swapped(held_out), s)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/specvet-grpo-diagnosis"))
    parser.add_argument("--grpo-steps", type=int, default=60)
    parser.add_argument("--grpo-lr", type=float, default=1e-3)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args(argv)
    import torch

    torch.set_num_threads(options.threads)
    settings = replace(
        PRESETS["cpu"], seed=options.seed, grpo_steps=options.grpo_steps,
        grpo_lr=options.grpo_lr, grpo_beta=options.beta, num_generations=4, prompts_per_step=8,
    )  # fmt: skip
    out = options.out / f"{options.mode}-seed{options.seed}"
    result = diagnose(options.mode, out, settings)
    (out / "diagnosis.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "batch_accuracy"}))
    return result


if __name__ == "__main__":
    main()
