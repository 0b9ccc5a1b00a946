"""Shown to learn: SFT and GRPO on the tiny model learn an answer that is visible in the prompt.

Each prompt is a short system prompt, the spectrum plot I0 (through the project's renderer and
image processor) and a one-line T0 that carries a hint: ``(hint: Y)`` or ``(hint: N)``. (The
real inspection prompt is about 4,600 byte-level tokens; on this shared 2-core machine one SFT
step of 4 such rows took 65 s, so the task's prompt is kept short.) The hint is the label; the spectrum is not
(labels are assigned alternately, whatever the spectrum shows), so the only way to be right is
to read the hint. The demonstrations and rollouts answer in one turn:
``<answer>\\boxed{YES}</answer>``.

- **SFT** (``training.sft`` path, assistant-only loss) on hinted demonstrations from the random
  tiny model. Accuracy is teacher-forced on held-out hinted prompts: the share where the model
  puts more probability on the hint's letter than on the other one right after ``\\boxed{``.
- **GRPO** (``training.grpo`` path: environment, eq. 3 reward, TRL's loss, rollouts sampled by
  the model itself with ``generate``) from a format-only SFT checkpoint: SFT on demonstrations
  whose answers ignore the hint, so GRPO starts at chance. Reward is the mean eq.-3 reward of the
  step's rollouts (1 right, 0 wrong, minus 0.2 for bad format).

For every trainable parameter group (the language model's layers, embeddings, norms) the
benchmark checks the weights moved, and that the frozen vision tower did not.

```bash
python -m training.bench_learning --out /tmp/learning
```

Status (2026-11-27, work in progress, no test yet): the tiny model does **not** yet learn the
hint by SFT. On this shared 2-core machine (load ~12), 40 SFT steps of 4 rows at lr 3e-2 took
212 s: the loss fell from 5.61 to 0.19 (the answer's format is learnt, every trainable group
moved, the vision tower did not) but the hint accuracy stayed at 0.50 (the Y/N logit gap is
~0.17 whatever the hint); 40 more steps from there reached loss 0.05-0.18, accuracy still 0.50.
The 2-layer, hidden-32 model (head_dim 8) may need a copy task with a shorter distance, more
steps, or a larger tiny model; the GRPO stage (from a hint-blind format SFT) was not reached.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LETTERS = ("Y", "N")
SYSTEM = "Follow the hint."  # no capital Y or N: the hint is the only one before the answer
QUESTION = "<image>Is this a cataclysmic variable?"


@dataclass(frozen=True)
class LearningSettings:
    sft_steps: int = 40
    grpo_steps: int = 30
    format_steps: int = 20
    train_items: int = 16
    eval_items: int = 16
    sft_lr: float = 3e-2
    grpo_lr: float = 1e-2
    num_generations: int = 8
    seed: int = 0


def hint_text(label: str) -> str:
    return f" (hint: {label[0]})"


def answer_turn(label: str) -> str:
    """The one-turn answer (no ``<think>``: a shorter string to learn; eq. 3 then scores a right
    answer 0.8 and a wrong one -0.2, the same 1.0 apart as with good format)."""
    return f"<answer>\\boxed{{{label}}}</answer>"


def hinted_trajectories(
    n: int, *, split: str, seed: int, answers_follow_hint: bool = True
) -> list[Any]:
    """``n`` one-turn trajectories on SpecVI-mini CV spectra, hint appended to T0; labels
    alternate (YES, NO, ...) independently of the spectra. With ``answers_follow_hint`` False
    the answer is the other label half the time (a hint the data teaches to ignore)."""
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect
    from agent.synthetic import generate_split
    from agent.trajectory import Trajectory

    task = get_task("CV")
    samples = generate_split("CV", split, n_pos=(n + 1) // 2, n_neg=n // 2, seed=seed)
    trajectories = []
    for index, sample in enumerate(samples[:n]):
        label = "YES" if index % 2 == 0 else "NO"
        answer = label
        if not answers_follow_hint and (index // 2) % 2 == 1:
            answer = "NO" if label == "YES" else "YES"
        turns = [answer_turn(answer)]
        trajectory = inspect(sample.spectrum, task, _Scripted(turns))
        data = trajectory.to_dict()
        data["system_prompt"] = SYSTEM
        data["user_prompt"] = QUESTION + hint_text(label)
        data["meta"] = {**trajectory.meta, "hint": label}
        hinted = Trajectory.from_dict(data)
        hinted.finalize(trajectory.stop_reason)
        trajectories.append(hinted)
    return trajectories


class _Scripted:
    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    def info(self) -> dict[str, Any]:
        return {"name": "scripted"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.turns.pop(0)


def hint_accuracy(model: Any, processor: Any, trajectories: Sequence[Any]) -> float:
    """Share of trajectories where the model prefers the hint's letter after ``\\boxed{``
    (teacher-forced on the demonstration's own prompt)."""
    import torch
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from agent.formats import to_trl_example

    tokenizer = processor.tokenizer
    letter_ids = {letter: tokenizer.convert_tokens_to_ids(letter) for letter in LETTERS}
    marker = tokenizer("boxed{", add_special_tokens=False)["input_ids"]
    collator = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    right = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for trajectory in trajectories:
            batch = collator([to_trl_example(trajectory, images_as="pil")])
            batch.pop("labels", None)
            batch.pop("assistant_masks", None)
            batch = {k: v.to(model.device) for k, v in batch.items() if hasattr(v, "to")}
            ids = batch["input_ids"][0].tolist()
            position = _after(ids, marker)
            logits = model(**batch).logits[0, position - 1].float()
            hint = trajectory.meta["hint"][0]
            other = "N" if hint == "Y" else "Y"
            right += int(logits[letter_ids[hint]] > logits[letter_ids[other]])
    model.train(was_training)
    return right / len(trajectories)


def _after(ids: list[int], marker: list[int]) -> int:
    """The index just after the last occurrence of ``marker`` in ``ids``."""
    for start in range(len(ids) - len(marker), -1, -1):
        if ids[start : start + len(marker)] == marker:
            return start + len(marker)
    raise ValueError("no \\boxed{ in the rendered demonstration")


def parameter_groups(model: Any) -> dict[str, list[str]]:
    """Parameter names by group: vision tower, embeddings, each decoder layer, final norm/head."""
    groups: dict[str, list[str]] = {}
    for name, _ in model.named_parameters():
        if "visual" in name:
            key = "vision"
        elif (match := re.search(r"layers\.(\d+)\.", name)) is not None:
            key = f"layer{match.group(1)}"
        elif "embed" in name:
            key = "embeddings"
        else:
            key = "head_and_norm"
        groups.setdefault(key, []).append(name)
    return groups


def moved_groups(model: Any, before: dict[str, Any]) -> dict[str, bool]:
    """Per group: did any weight of the group change?"""
    import torch

    after = dict(model.named_parameters())
    return {
        group: any(not torch.equal(before[n], after[n].detach().float()) for n in names)
        for group, names in parameter_groups(model).items()
    }


def snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def _sft_args(model: Path, output_dir: Path, steps: int, lr: float, seed: int) -> tuple:
    from training.sft import parse_args

    config = Path(__file__).resolve().parent / "configs" / "sft_cpu_tiny.yaml"
    return parse_args(
        [
            "--config", str(config), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--max_steps", str(steps),
            "--learning_rate", str(lr), "--per_device_train_batch_size", "4",
            "--lr_scheduler_type", "constant", "--seed", str(seed),
        ]
    )  # fmt: skip


def run_sft(
    model: Path, output_dir: Path, trajectories: list[Any], eval_set: list[Any], **kw: Any
) -> dict[str, Any]:
    """SFT ``model`` on ``trajectories``; accuracy on ``eval_set`` before and after."""
    from training.sft import build_sft_run, save_sft_run

    args = _sft_args(model, output_dir, kw["steps"], kw["lr"], kw["seed"])
    run = build_sft_run(*args, trajectories=trajectories)
    trainer = run.trainer
    before = snapshot(trainer.model)
    accuracy_before = hint_accuracy(trainer.model, run.processor, eval_set)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    accuracy_after = hint_accuracy(trainer.model, run.processor, eval_set)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    result = {
        "steps": kw["steps"],
        "seconds": round(seconds, 1),
        "accuracy_before": accuracy_before,
        "accuracy_after": accuracy_after,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "moved": moved_groups(trainer.model, before),
    }
    result["checkpoint"] = str(save_sft_run(run, *args))
    return result


def run_grpo(
    model: Path, output_dir: Path, items: list[Any], eval_set: list[Any], **kw: Any
) -> dict[str, Any]:
    """GRPO from ``model`` on hinted label-only ``items``; rewards of the first and last steps,
    hint accuracy on ``eval_set`` before and after."""
    from training.callbacks import JsonlMetricsSink
    from training.grpo import build_grpo_run, parse_args

    config = Path(__file__).resolve().parent / "configs" / "grpo_cpu_tiny.yaml"
    n = kw["num_generations"]
    args = parse_args(
        [
            "--config", str(config), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--max_steps", str(kw["steps"]),
            "--learning_rate", str(kw["lr"]), "--per_device_train_batch_size", str(n),
            "--num_generations", str(n), "--max_completion_length", "64",
            "--lr_scheduler_type", "constant", "--seed", str(kw["seed"]),
        ]
    )  # fmt: skip
    run = build_grpo_run(*args, items=items, sink=JsonlMetricsSink(output_dir / "metrics.jsonl"))
    hints = {item.sample_id: item.label for item in items}
    run.trainer.train_dataset = run.dataset.map(
        lambda row: {"prompt": with_hint(row["prompt"], hints[row["sample_id"]])}
    )
    trainer = run.trainer
    before = snapshot(trainer.model)
    accuracy_before = hint_accuracy(trainer.model, run.processor, eval_set)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    accuracy_after = hint_accuracy(trainer.model, run.processor, eval_set)
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    window = max(1, len(rewards) // 4)
    return {
        "steps": kw["steps"],
        "seconds": round(seconds, 1),
        "reward_first": sum(rewards[:window]) / window,
        "reward_last": sum(rewards[-window:]) / window,
        "rewards": [round(r, 3) for r in rewards],
        "accuracy_before": accuracy_before,
        "accuracy_after": accuracy_after,
        "moved": moved_groups(trainer.model, before),
    }


def with_hint(messages: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """The GRPO prompt of the hinted task: the short system prompt, the row's I0 and the
    one-line question with the hint (the same rendering as the SFT demonstrations)."""
    result: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
    ]
    for message in messages:
        if message["role"] == "user":
            images = [part for part in message["content"] if part.get("type") == "image"]
            text = QUESTION.replace("<image>", "") + hint_text(label)
            result.append({"role": "user", "content": [*images, {"type": "text", "text": text}]})
            break
    return result


def labelled_items(trajectories: Sequence[Any]) -> list[Any]:
    """GRPO items of the hinted trajectories: their spectra, with the hint as the label."""
    from training.data import LabelledSpectrum

    return [
        LabelledSpectrum(t.spectrum, "CV", t.meta["hint"], f"{t.spectrum.object_id}-{i}")
        for i, t in enumerate(trajectories)
    ]


def run_benchmark(model: Path, out: Path, settings: LearningSettings) -> dict[str, Any]:
    s = settings
    train = hinted_trajectories(s.train_items, split="train", seed=s.seed)
    eval_set = hinted_trajectories(s.eval_items, split="test", seed=s.seed + 1)
    sft = run_sft(model, out / "sft", train, eval_set, steps=s.sft_steps, lr=s.sft_lr, seed=s.seed)
    print("sft", json.dumps(sft, default=str), flush=True)
    ignoring = hinted_trajectories(
        s.train_items, split="train", seed=s.seed, answers_follow_hint=False
    )
    format_only = run_sft(
        model, out / "format", ignoring, eval_set, steps=s.format_steps, lr=s.sft_lr, seed=s.seed
    )
    print("format_sft", json.dumps(format_only, default=str), flush=True)
    grpo = run_grpo(
        Path(format_only["checkpoint"]),
        out / "grpo",
        labelled_items(train),
        eval_set,
        steps=s.grpo_steps,
        lr=s.grpo_lr,
        seed=s.seed,
        num_generations=s.num_generations,
    )
    return {"settings": s.__dict__, "sft": sft, "format_sft": format_only, "grpo": grpo}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from training.tiny_model import build_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/specvet-learning"))
    parser.add_argument("--sft-steps", type=int, default=LearningSettings.sft_steps)
    parser.add_argument("--grpo-steps", type=int, default=LearningSettings.grpo_steps)
    options = parser.parse_args(argv)
    model = build_tiny_model(options.out / "tiny")
    settings = LearningSettings(sft_steps=options.sft_steps, grpo_steps=options.grpo_steps)
    result = run_benchmark(model, options.out, settings)
    print(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
