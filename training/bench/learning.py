"""Shown to learn: SFT and GRPO on a tiny model learn an answer that is visible in the prompt.

Each prompt is a short system prompt, the spectrum plot I0 (through the project's renderer and
image processor) and a one-line T0 that carries a hint, the answer's first letter repeated
(``(hint: YYYYYYYYYYYY)`` or ``(hint: NNNNNNNNNNNN)``). The hint is the label; the spectrum is
not (labels alternate whatever the spectrum shows), so the only way to be right is to read the
hint. Demonstrations and rollouts answer in one turn: ``<answer>\\boxed{YES}</answer>``.

- **SFT** (``training.sft``: assistant-only loss, frozen vision tower, the precision plan) on
  hinted demonstrations. Accuracy is teacher-forced on held-out hinted prompts: the share where
  the model puts more probability on the hint's letter than on the other one after ``\\boxed{``.
- **GRPO** (``training.grpo``: environment, eq. 3 reward, TRL's loss, rollouts sampled by the
  model itself) from a *format-only* SFT checkpoint, trained on demonstrations whose answers
  ignore the hint, so it answers YES or NO at random. The GRPO rows are all labelled YES (and
  hinted so): the reward is the only teacher. Each step samples 8 rollouts for each of 4
  prompts (temperature 1.0, lr 1e-3, beta 0, ``dapo`` loss). Reward is the mean eq.-3 reward of
  a step's rollouts (0.8 right, -0.2 wrong for a one-turn answer without ``<think>``); rollout
  accuracy is the share of a step's rollouts that answer the label (``batch_accuracy``); both
  are compared between the first and the last quarter of the steps. (Teacher-forced, the
  format checkpoint already puts more probability on Y than on N, so that accuracy cannot show
  what sampling does. Reading the hint by GRPO alone did not rise in 30 steps of one prompt at
  lr 1e-3 on this model; learning the rewarded label is what a few dozen CPU steps show.)

For every parameter group (embeddings, each decoder layer's attention, MLP and norms, the final
norm and head, the vision tower) the benchmark records the share of weights that changed; the
trainable groups must move and the frozen vision tower must not. ``--sabotage`` runs the
negative controls a learning check must catch: ``frozen`` (decoder layers frozen),
``masked_answer`` (the loss mask hides the answer), ``bf16`` (pure-bf16 weights, no fp32
master copy, on the bf16 checkpoint), ``constant_reward`` (GRPO reward the same for every
rollout).

Why this model and task: the 2-layer hidden-32 smoke model (head_dim 8) learnt the format but
not a one-letter hint in 80 steps (accuracy 0.50); hidden 64 with 2 heads (head_dim 32), a
repeated hint and lr 3e-3 learn it in about 30 steps. The checkpoint is stored in bf16 like the
released Qwen2.5-VL weights, so the run goes through the fp32-master-weights plan.

```bash
python -m training.bench.learning --out /tmp/specvet-learning
python -m training.bench.learning --out /tmp/specvet-learning --sabotage bf16
```
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LETTERS = ("Y", "N")
SYSTEM = "Follow the hint."  # no capital Y or N: the hint is the only one before the answer
QUESTION = "<image>Is this a cataclysmic variable?"
SABOTAGES = ("none", "frozen", "masked_answer", "bf16", "constant_reward")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@dataclass(frozen=True)
class LearningSettings:
    hidden_size: int = 64
    num_attention_heads: int = 2
    hint_repeats: int = 12
    train_items: int = 16
    eval_items: int = 16
    sft_steps: int = 30
    sft_lr: float = 3e-3
    format_steps: int = 60
    grpo_steps: int = 16
    grpo_lr: float = 1e-3
    grpo_label: str = "YES"
    temperature: float = 1.0
    num_generations: int = 8
    # Several prompts per step: a step's gradient averages 4 groups of 8 rollouts instead of
    # one (with one prompt per step the reward did not rise in 12 to 30 steps).
    prompts_per_step: int = 4
    seed: int = 0
    # What "learnt" means: accuracy up by this much, reward up by this much, and at least this
    # share of every trainable group's weights changed (fp32 master weights change all of them;
    # pure bf16 leaves about half of the norm weights, which sit near 1.0, where they are).
    accuracy_margin: float = 0.3
    # GRPO: mean reward and rollout accuracy of the last quarter of the steps over the first.
    reward_margin: float = 0.15
    rollout_accuracy_margin: float = 0.15
    moved_share: float = 0.9


# --- the task ----------------------------------------------------------------------------------


def hint_text(label: str, repeats: int) -> str:
    return f" (hint: {label[0] * repeats})"


def answer_turn(label: str) -> str:
    return f"<answer>\\boxed{{{label}}}</answer>"


def hinted_trajectories(
    n: int,
    *,
    split: str,
    seed: int,
    repeats: int,
    answers_follow_hint: bool = True,
    label: str | None = None,
) -> list[Any]:
    """``n`` one-turn trajectories on SpecVI-mini CV spectra, hint appended to T0; labels
    alternate (YES, NO, ...) independently of the spectra, or are all ``label``. With
    ``answers_follow_hint`` False the answer is the other label half the time (a hint the data
    teaches to ignore)."""
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect
    from agent.synthetic import generate_split
    from agent.trajectory import Trajectory

    task = get_task("CV")
    samples = generate_split("CV", split, n_pos=(n + 1) // 2, n_neg=n // 2, seed=seed)
    trajectories = []
    for index, sample in enumerate(samples[:n]):
        hint = label or alternating(index)
        answer = hint
        if not answers_follow_hint and (index // 2) % 2 == 1:
            answer = "NO" if hint == "YES" else "YES"
        trajectory = inspect(sample.spectrum, task, _Scripted([answer_turn(answer)]))
        data = trajectory.to_dict()
        data["system_prompt"] = SYSTEM
        data["user_prompt"] = QUESTION + hint_text(hint, repeats)
        data["meta"] = {**trajectory.meta, "hint": hint}
        hinted = Trajectory.from_dict(data)
        hinted.finalize(trajectory.stop_reason)
        trajectories.append(hinted)
    return trajectories


def alternating(index: int) -> str:
    return "YES" if index % 2 == 0 else "NO"


class _Scripted:
    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    def info(self) -> dict[str, Any]:
        return {"name": "scripted"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.turns.pop(0)


def with_hint(messages: list[dict[str, Any]], label: str, repeats: int) -> list[dict[str, Any]]:
    """The GRPO prompt of the hinted task: the short system prompt, the row's I0 and the
    one-line question with the hint (the same rendering as the SFT demonstrations)."""
    result: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
    ]
    for message in messages:
        if message["role"] == "user":
            images = [part for part in message["content"] if part.get("type") == "image"]
            text = QUESTION.replace("<image>", "") + hint_text(label, repeats)
            result.append({"role": "user", "content": [*images, {"type": "text", "text": text}]})
            break
    return result


def labelled_items(n: int, *, split: str, seed: int, label: str | None = None) -> list[Any]:
    """GRPO items of ``hinted_trajectories(n, split=split, seed=seed, label=label)``: the same
    spectra, with the hint (YES, NO, ... or all ``label``) as the label."""
    from agent.synthetic import generate_split
    from training.data import LabelledSpectrum

    samples = generate_split("CV", split, n_pos=(n + 1) // 2, n_neg=n // 2, seed=seed)
    return [
        LabelledSpectrum(
            sample.spectrum, "CV", label or alternating(i), f"{sample.spectrum.object_id}-{i}"
        )
        for i, sample in enumerate(samples[:n])
    ]


# --- measurements ------------------------------------------------------------------------------


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
            position = _after(batch["input_ids"][0].tolist(), marker)
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


def group_of(name: str) -> str:
    """The parameter group of a weight: vision tower, embeddings, each decoder layer's
    attention / MLP / norms, and the final norm with the head."""
    if "visual" in name:
        return "vision"
    if (match := re.search(r"layers\.(\d+)\.(self_attn|mlp|\w*layernorm)", name)) is not None:
        part = "norms" if match.group(2).endswith("layernorm") else match.group(2)
        return f"layer{match.group(1)}.{part}"
    if "embed" in name:
        return "embeddings"
    return "final_norm_and_head"


def snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def moved_shares(
    model: Any, before: dict[str, Any], used_tokens: set[int] | None = None
) -> dict[str, float]:
    """Per group: the share of its weights whose value changed. For the token embeddings only
    the rows of ``used_tokens`` count (the rows of tokens the data never shows get no
    gradient)."""
    changed: dict[str, int] = {}
    total: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        group = group_of(name)
        difference = before[name] != parameter.detach().float()
        if used_tokens is not None and "embed_tokens" in name:
            difference = difference[sorted(used_tokens)]
        changed[group] = changed.get(group, 0) + int(difference.sum())
        total[group] = total.get(group, 0) + difference.numel()
    return {group: round(changed[group] / total[group], 4) for group in sorted(total)}


def used_token_ids(processor: Any, trajectories: Sequence[Any]) -> set[int]:
    """The token ids the rendered ``trajectories`` hold, less the image placeholder (its
    embedding is replaced by the vision tower's output)."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from agent.formats import to_trl_example

    collator = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    batch = collator([to_trl_example(t, images_as="pil") for t in trajectories])
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return {int(i) for i in batch["input_ids"].flatten().tolist()} - {
        image_pad,
        processor.tokenizer.pad_token_id,
    }


def trainable_groups(model: Any) -> set[str]:
    return {group_of(n) for n, p in model.named_parameters() if p.requires_grad}


def shortfalls(result: dict[str, Any], settings: LearningSettings) -> list[str]:
    """Why a stage's result does not show learning (empty: it learnt). ``frozen_groups`` are
    those the recipe freezes (the vision tower); every other group is expected to move."""
    problems = []
    if "reward_first" in result:
        # GRPO: the rollouts themselves (sampled at the run's temperature) must get better.
        gain = result["reward_last"] - result["reward_first"]
        if not gain >= settings.reward_margin:
            problems.append(f"reward rose {gain:+.2f} < {settings.reward_margin}")
        rise = result["rollout_accuracy_last"] - result["rollout_accuracy_first"]
        if not rise >= settings.rollout_accuracy_margin:
            problems.append(
                f"rollout accuracy rose {rise:+.2f} < {settings.rollout_accuracy_margin}"
            )
    else:
        rise = result["accuracy_after"] - result["accuracy_before"]
        if rise < settings.accuracy_margin:
            problems.append(f"accuracy rose {rise:+.2f} < {settings.accuracy_margin}")
    for group, share in result["moved"].items():
        if group in result["frozen_groups"]:
            if share > 0:
                problems.append(f"frozen group {group} moved ({share:.2%})")
        elif share < settings.moved_share:
            problems.append(f"group {group}: {share:.2%} of weights moved")
    return problems


# --- sabotage (negative controls) --------------------------------------------------------------


@contextlib.contextmanager
def pure_bf16_loading(enabled: bool) -> Iterator[None]:
    """With ``enabled``, the run's model is loaded and kept in bf16: the precision plan's fp32
    master weights are bypassed (the bug of issue 24, item 1)."""
    if not enabled:
        yield
        return
    import torch

    from training import grpo, sft

    originals = {module: module.load_model for module in (sft, grpo)}

    def load_bf16(model_args: Any, precision: Any = None) -> Any:
        return originals[sft](model_args, None).to(torch.bfloat16)

    try:
        for module in originals:
            module.load_model = load_bf16  # type: ignore[attr-defined]
        yield
    finally:
        for module, original in originals.items():
            module.load_model = original  # type: ignore[attr-defined]


def freeze_decoder_layers(model: Any) -> None:
    for name, parameter in model.named_parameters():
        if "layers." in name and "visual" not in name:
            parameter.requires_grad_(False)


def answer_hiding_collator(collator: Callable[..., Any], tokenizer: Any) -> Callable[..., Any]:
    """A collator whose labels leave out the answer inside ``\\boxed{...}``."""
    marker = tokenizer("boxed{", add_special_tokens=False)["input_ids"]
    closing = tokenizer.convert_tokens_to_ids("}")

    def collate(examples: list[Any]) -> Any:
        batch = collator(examples)
        for row, ids in enumerate(batch["input_ids"].tolist()):
            start = _after(ids, marker)
            end = ids.index(closing, start)
            batch["labels"][row, start:end] = -100
        return batch

    return collate


def constant_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    return [1.0] * len(completions)


# --- the stages --------------------------------------------------------------------------------


def run_sft(
    model: Path,
    output_dir: Path,
    trajectories: list[Any],
    eval_set: list[Any],
    *,
    steps: int,
    lr: float,
    seed: int,
    sabotage: str = "none",
) -> dict[str, Any]:
    """SFT ``model`` on ``trajectories`` through ``training.sft``; hint accuracy on
    ``eval_set`` before and after, and which weights moved."""
    from training.sft import build_sft_run, parse_args, save_sft_run

    args = parse_args(
        [
            "--config", str(CONFIGS / "sft_cpu_tiny.yaml"), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--max_steps", str(steps),
            "--learning_rate", str(lr), "--per_device_train_batch_size", "4",
            "--lr_scheduler_type", "constant", "--seed", str(seed),
        ]
    )  # fmt: skip
    with pure_bf16_loading(sabotage == "bf16"):
        run = build_sft_run(*args, trajectories=trajectories)
    trainer = run.trainer
    if sabotage == "frozen":
        freeze_decoder_layers(trainer.model)
    if sabotage == "masked_answer":
        trainer.data_collator = answer_hiding_collator(
            trainer.data_collator, run.processor.tokenizer
        )
    result = _train(trainer, run.processor, eval_set)
    result["steps"] = steps
    result["loss_first"], result["loss_last"] = _first_last(trainer, "loss", window=1)
    result["precision"] = run.precision.as_dict() if run.precision else None
    result["checkpoint"] = str(save_sft_run(run, *args))
    return result


def run_grpo(
    model: Path,
    output_dir: Path,
    items: list[Any],
    eval_set: list[Any],
    *,
    steps: int,
    lr: float,
    seed: int,
    num_generations: int,
    repeats: int,
    temperature: float,
    prompts_per_step: int = 1,
    sabotage: str = "none",
) -> dict[str, Any]:
    """GRPO from ``model`` on hinted label-only ``items`` through ``training.grpo``; mean
    reward of the first and last quarter of the steps, hint accuracy before and after."""
    from training.callbacks import JsonlMetricsSink
    from training.grpo import build_grpo_run, parse_args

    n = num_generations
    args = parse_args(
        [
            "--config", str(CONFIGS / "grpo_cpu_tiny.yaml"), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--max_steps", str(steps),
            "--learning_rate", str(lr), "--per_device_train_batch_size", str(n * prompts_per_step),
            "--num_generations", str(n), "--max_completion_length", "32",
            "--lr_scheduler_type", "constant", "--seed", str(seed),
            "--temperature", str(temperature),
        ]
    )  # fmt: skip
    with pure_bf16_loading(sabotage == "bf16"):
        run = build_grpo_run(
            *args, items=items, sink=JsonlMetricsSink(output_dir / "metrics.jsonl")
        )
    hints = {item.sample_id: item.label for item in items}
    trainer = run.trainer
    trainer.train_dataset = run.dataset.map(
        lambda row: {"prompt": with_hint(row["prompt"], hints[row["sample_id"]], repeats)}
    )
    if sabotage == "frozen":
        freeze_decoder_layers(trainer.model)
    if sabotage == "constant_reward":
        trainer.reward_funcs = [constant_reward]
    result = _train(trainer, run.processor, eval_set)
    result["steps"] = steps
    result["reward_first"], result["reward_last"] = _first_last(trainer, "reward")
    result["rollout_accuracy_first"], result["rollout_accuracy_last"] = _first_last(
        trainer, "batch_accuracy"
    )
    result["rewards"] = [round(e["reward"], 3) for e in trainer.state.log_history if "reward" in e]
    return result


def _train(trainer: Any, processor: Any, eval_set: list[Any]) -> dict[str, Any]:
    model = trainer.model
    before = snapshot(model)
    frozen = sorted({group_of(n) for n, _ in model.named_parameters()} - trainable_groups(model))
    accuracy_before = hint_accuracy(model, processor, eval_set)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 1),
        "accuracy_before": accuracy_before,
        "accuracy_after": hint_accuracy(trainer.model, processor, eval_set),
        "moved": moved_shares(trainer.model, before, used_token_ids(processor, eval_set)),
        "frozen_groups": ["vision"] if "vision" in frozen else [],
        "dtype": str(next(trainer.model.parameters()).dtype),
    }


def _first_last(trainer: Any, key: str, window: int | None = None) -> tuple[float, float]:
    values = [entry[key] for entry in trainer.state.log_history if key in entry]
    if not values:
        return float("nan"), float("nan")
    size = window or max(1, len(values) // 4)
    return sum(values[:size]) / size, sum(values[-size:]) / size


# --- the benchmark -----------------------------------------------------------------------------


def build_learning_model(path: Path, settings: LearningSettings) -> Path:
    """The wider tiny Qwen2.5-VL (hidden ``settings.hidden_size``), stored in bf16 like the
    released checkpoints; written in a second on the CPU."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from training.tiny_model import build_tiny_model

    build_tiny_model(
        path, hidden_size=settings.hidden_size, num_attention_heads=settings.num_attention_heads
    )
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
    model.to(torch.bfloat16).save_pretrained(path)  # type: ignore[arg-type]
    return path


def run_sft_stage(
    model: Path, out: Path, settings: LearningSettings, sabotage: str = "none"
) -> dict[str, Any]:
    s = settings
    train = hinted_trajectories(s.train_items, split="train", seed=s.seed, repeats=s.hint_repeats)
    eval_set = hinted_trajectories(
        s.eval_items, split="test", seed=s.seed + 1, repeats=s.hint_repeats
    )
    return run_sft(
        model, out / "sft", train, eval_set, steps=s.sft_steps, lr=s.sft_lr, seed=s.seed,
        sabotage=sabotage,
    )  # fmt: skip


def format_only_checkpoint(model: Path, out: Path, settings: LearningSettings) -> dict[str, Any]:
    """SFT on demonstrations whose answers ignore the hint: the format without the hint."""
    s = settings
    ignoring = hinted_trajectories(
        s.train_items, split="train", seed=s.seed, repeats=s.hint_repeats,
        answers_follow_hint=False,
    )  # fmt: skip
    eval_set = hinted_trajectories(
        s.eval_items, split="test", seed=s.seed + 1, repeats=s.hint_repeats
    )
    return run_sft(
        model, out / "format", ignoring, eval_set, steps=s.format_steps, lr=s.sft_lr, seed=s.seed
    )


def run_grpo_stage(
    start: Path, out: Path, settings: LearningSettings, sabotage: str = "none"
) -> dict[str, Any]:
    """GRPO on rows whose label is always ``settings.grpo_label`` (hinted so), from the
    format-only checkpoint that answers YES or NO at random: the reward is the only teacher."""
    s = settings
    items = labelled_items(s.train_items, split="train", seed=s.seed, label=s.grpo_label)
    eval_set = hinted_trajectories(
        s.eval_items, split="test", seed=s.seed + 1, repeats=s.hint_repeats, label=s.grpo_label
    )
    return run_grpo(
        start, out / "grpo", items, eval_set, steps=s.grpo_steps, lr=s.grpo_lr,
        seed=s.seed, num_generations=s.num_generations, repeats=s.hint_repeats,
        temperature=s.temperature, prompts_per_step=s.prompts_per_step, sabotage=sabotage,
    )  # fmt: skip


def run_benchmark(out: Path, settings: LearningSettings, sabotage: str = "none") -> dict[str, Any]:
    started = time.perf_counter()
    model = build_learning_model(out / "tiny", settings)
    sft = run_sft_stage(model, out, settings, sabotage)
    print("sft", json.dumps(sft, default=str), flush=True)
    format_only = format_only_checkpoint(model, out, settings)
    print("format_sft", json.dumps(format_only, default=str), flush=True)
    grpo = run_grpo_stage(Path(format_only["checkpoint"]), out, settings, sabotage)
    print("grpo", json.dumps(grpo, default=str), flush=True)
    return {
        "settings": asdict(settings),
        "sabotage": sabotage,
        "sft": sft,
        "format_sft": format_only,
        "grpo": grpo,
        "sft_shortfalls": shortfalls(sft, settings),
        "grpo_shortfalls": shortfalls(grpo, settings),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/specvet-learning"))
    parser.add_argument("--sft-steps", type=int, default=LearningSettings.sft_steps)
    parser.add_argument("--grpo-steps", type=int, default=LearningSettings.grpo_steps)
    parser.add_argument("--sabotage", choices=SABOTAGES, default="none")
    options = parser.parse_args(argv)
    settings = LearningSettings(sft_steps=options.sft_steps, grpo_steps=options.grpo_steps)
    result = run_benchmark(options.out, settings, options.sabotage)
    print(json.dumps(result, indent=1, default=str))
    for stage in ("sft", "grpo"):
        verdict = "learnt" if not result[f"{stage}_shortfalls"] else "did NOT learn"
        print(f"{stage}: {verdict}; {result[f'{stage}_shortfalls']}")
    return result


if __name__ == "__main__":
    main()
