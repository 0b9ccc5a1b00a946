"""The picture task of the learning benchmark (``training.bench.learning``, issue 33): the
synthetic spectra whose class is drawn into the plot, the rows and their controls (swapped,
blank, shuffled labels), the demonstrations, and the two held-out measures, greedy accuracy
through the agent's own loop and the mean probability of the true answer."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

VARIANTS = ("visible", "zoom")
TASK = "CV"  # the task record inspect() files the episodes under; the prompts are ours
SYSTEM = "Answer from the plot."
SYSTEM_TOOL = (
    'Answer from the plots. Zoom with <tool_call>{"name": "spectral_visualization_tool", '
    '"arguments": {"wavelength_range": [min, max]}}</tool_call>.'
)
QUESTION = "<image>Is H-alpha in emission?"
ZOOM_WINDOW = (6500.0, 6630.0)
H_ALPHA = 6564.6
H_BETA = 4862.7
GRID = np.arange(3800.0, 9000.0, 2.0)


class EvalSettings(Protocol):
    """What the held-out measures read of the benchmark's settings."""

    @property
    def variant(self) -> str: ...

    @property
    def max_new_tokens(self) -> int: ...


# --- the task ----------------------------------------------------------------------------------


def picture_spectrum(label: str, rng: np.random.Generator, variant: str, name: str) -> Any:
    """One synthetic spectrum of class ``label`` (YES/NO); the class is drawn into the flux."""
    from agent.spectra import Spectrum

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")
    continuum = 1.0 + rng.uniform(-0.3, 0.3) * (GRID - 6400.0) / 2600.0
    flux = continuum + rng.normal(0.0, rng.uniform(0.03, 0.06), GRID.size)
    if variant == "visible":
        if label == "YES":
            flux += rng.uniform(3.0, 5.0) * _gauss(H_ALPHA, rng.uniform(25.0, 40.0))
    else:
        flux += rng.uniform(12.0, 18.0) * _gauss(H_BETA, rng.uniform(25.0, 35.0))
        sign = 1.0 if label == "YES" else -1.0
        flux += sign * rng.uniform(0.45, 0.6) * _gauss(H_ALPHA, rng.uniform(3.0, 4.0))
    ivar = np.full(GRID.size, 400.0)
    return Spectrum(GRID.copy(), flux, ivar=ivar, survey="synthetic", object_id=name, source=name)


def _gauss(centre: float, sigma: float) -> np.ndarray:
    return np.exp(-0.5 * ((GRID - centre) / sigma) ** 2)


@dataclass(frozen=True)
class Item:
    spectrum: Any
    label: str  # what the spectrum shows (YES/NO)


def picture_items(n: int, *, variant: str, seed: int, split: str) -> list[Item]:
    """``n`` rows alternating YES, NO; ``split`` seeds its own generator, so train and held-out
    spectra never coincide."""
    offset = {"train": 1, "eval": 2}[split]
    rng = np.random.default_rng([seed, offset])
    labels = ["YES" if i % 2 == 0 else "NO" for i in range(n)]
    return [
        Item(picture_spectrum(label, rng, variant, f"{split}-{seed}-{i:04d}"), label)
        for i, label in enumerate(labels)
    ]


def swapped(items: Sequence[Item]) -> list[Item]:
    """Each row keeps its label but shows its neighbour's spectrum (the other class)."""
    return [Item(items[i ^ 1].spectrum, item.label) for i, item in enumerate(items)]


def shuffled_labels(items: Sequence[Item], seed: int = 0) -> list[Item]:
    """Labels that carry nothing about the picture: every spectrum twice, once answered YES and
    once NO, in the order YES, NO (so every even batch stays 50/50). The best a model can do on
    these rows is say each answer with probability 1/2 whatever the picture.

    Two earlier versions failed as controls, and why is the point: a plain permutation of the
    labels, and then one with exactly half of each class labelled YES, both still give every
    picture *one* fixed label. 80 SFT steps memorise those 32 picture -> label pairs, and the
    memorised map generalises through the one feature the pictures have (emission or not) with a
    sign set by chance: held-out 0.12, 0.16 and 1.00 on seeds 0-2. ``seed`` is unused (kept so
    callers need not change); nothing here is random, so nothing can line up with the class."""
    del seed
    return [Item(item.spectrum, label) for item in items for label in ("YES", "NO")]


def blank_png() -> bytes:
    from PIL import Image

    from agent.tool import IMAGE_SIZE

    buffer = io.BytesIO()
    Image.new("RGB", IMAGE_SIZE, "white").save(buffer, format="PNG")
    return buffer.getvalue()


def opening(variant: str, *, blank: bool = False) -> Any:
    """The first turn every row gets: our system prompt and question, specvet's I0 (or a blank
    image of the same size)."""
    from agent.rollout import Opening
    from agent.trajectory import ImageRef

    image = ImageRef(blank_png(), None, None) if blank else None
    system = SYSTEM_TOOL if variant == "zoom" else SYSTEM
    return Opening(user_prompt=QUESTION, system_prompt=system, image=image)


def tool_budget(variant: str) -> int:
    """Observations an episode may use: none to answer from I0, one zoom for ``zoom``."""
    return 1 if variant == "zoom" else 0


def tool_call_turn() -> str:
    arguments = {"wavelength_range": list(ZOOM_WINDOW)}
    return f"<tool_call>{json.dumps({'name': 'spectral_visualization_tool', 'arguments': arguments})}</tool_call>"


def answer_turn(label: str) -> str:
    return f"<answer>\\boxed{{{label}}}</answer>"


class _Scripted:
    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    def info(self) -> dict[str, Any]:
        return {"name": "scripted"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.turns.pop(0)


def demonstrations(items: Sequence[Item], variant: str, *, blank: bool = False) -> list[Any]:
    """SFT trajectories through the agent's own loop: (``zoom``: the tool call on the H-alpha
    window, its plot), then the row's label."""
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect

    task = get_task(TASK)
    first = opening(variant, blank=blank)
    trajectories = []
    for item in items:
        turns = [answer_turn(item.label)]
        if variant == "zoom":
            turns.insert(0, tool_call_turn())
        trajectory = inspect(item.spectrum, task, _Scripted(turns), opening=first)
        if trajectory.answer is None or trajectory.answer.prediction != item.label:
            raise RuntimeError(f"demonstration of {item.spectrum.object_id} did not answer")
        trajectories.append(trajectory)
    return trajectories


# --- held-out greedy accuracy ------------------------------------------------------------------


class GreedyPolicy:
    """The model being trained, as an agent policy: greedy, ``max_new_tokens`` per turn.
    ``generate_batch`` decodes a round of episodes together (left padding), which is what
    ``agent.rollout.inspect_batch`` calls."""

    def __init__(self, model: Any, processor: Any, max_new_tokens: int) -> None:
        self.model, self.processor, self.max_new_tokens = model, processor, max_new_tokens
        tokenizer = processor.tokenizer
        self.stop = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]

    def info(self) -> dict[str, Any]:
        return {"name": "greedy-in-training"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.generate_batch([messages])[0]

    def generate_batch(self, conversations: list[list[dict[str, Any]]]) -> list[str]:
        import torch

        from agent.parsing import strip_special_tokens
        from agent.policies.transformers_policy import to_processor_messages

        if not conversations:
            return []
        tokenizer = self.processor.tokenizer
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        try:
            inputs = self.processor.apply_chat_template(
                [to_processor_messages(messages) for messages in conversations],
                add_generation_prompt=True, tokenize=True, return_dict=True,
                return_tensors="pt", padding=True,
            ).to(self.model.device)  # fmt: skip
        finally:
            tokenizer.padding_side = side
        with torch.no_grad():
            output = self.model.generate(
                **inputs, do_sample=False, temperature=None, top_p=None, top_k=None,
                max_new_tokens=self.max_new_tokens, eos_token_id=self.stop,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        texts = []
        for row in output[:, inputs["input_ids"].shape[1] :].tolist():
            for index, token in enumerate(row):
                if token in self.stop:
                    row = row[:index]
                    break
            texts.append(strip_special_tokens(tokenizer.decode(row, skip_special_tokens=False)))
        return texts


def greedy_accuracy(
    model: Any,
    processor: Any,
    items: Sequence[Item],
    settings: EvalSettings,
    *,
    blank: bool = False,
    use_tool: bool = True,
) -> dict[str, float]:
    """Held-out greedy accuracy through ``agent.rollout.inspect`` (tool calls run for real),
    the mean probability of the true answer (``answer_probability``), and the share of
    episodes that called the tool and that answered YES."""
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect_batch

    policy = GreedyPolicy(model, processor, settings.max_new_tokens)
    task, first = get_task(TASK), opening(settings.variant, blank=blank)
    was_training = model.training
    model.eval()
    try:
        trajectories = inspect_batch(
            [(item.spectrum, task) for item in items], policy,
            max_tool_calls=tool_budget(settings.variant), use_tool=use_tool,
            openings=[first] * len(items),
        )  # fmt: skip
    finally:
        model.train(was_training)
    right = calls = yes = 0
    for item, trajectory in zip(items, trajectories, strict=True):
        prediction = trajectory.answer.prediction if trajectory.answer else None
        right += prediction == item.label
        yes += prediction == "YES"
        calls += any(step.tool_call is not None for step in trajectory.steps)
    n = len(items)
    p_true = answer_probability(model, processor, items, settings, blank=blank, use_tool=use_tool)
    return {
        "accuracy": right / n, "p_true": round(p_true, 3), "tool_call_share": calls / n,
        "yes_share": yes / n,
    }  # fmt: skip


ANSWER_PREFIX = "<answer>\\boxed{"


class _ProbePolicy:
    """Drives ``agent.rollout.inspect`` to the answer turn (``zoom``: through the scripted zoom
    call and its real plot) and keeps the conversation there, to be scored teacher-forced."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.kept: list[list[dict[str, Any]]] = []

    def info(self) -> dict[str, Any]:
        return {"name": "answer-probe"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        called = sum(message["role"] == "assistant" for message in messages)
        if self.variant == "zoom" and called == 0:
            return tool_call_turn()
        self.kept.append(messages)
        return answer_turn("YES")


def answer_probability(
    model: Any,
    processor: Any,
    items: Sequence[Item],
    settings: EvalSettings,
    *,
    blank: bool = False,
    use_tool: bool = True,
) -> float:
    """Mean probability the model gives the true answer, read at the decision token: the answer
    turn teacher-forced to ``<answer>\\boxed{`` and P(``Y``) against P(``N``) there. This is
    the accuracy the model would have answering by sampling; greedy accuracy alone cannot tell
    an indifferent model (every P(true) near 1/2) from one that has learnt, because greedy
    decoding turns the smallest picture-dependent tilt into a whole answer: the format
    checkpoint, trained to say each answer half the time for every picture, scored 0.12 greedy
    on seed 0 with all its probabilities near 1/2."""
    import torch

    from agent.inspection_tasks import get_task
    from agent.policies.transformers_policy import to_processor_messages
    from agent.rollout import inspect

    tokenizer = processor.tokenizer
    prefix = tokenizer.encode(ANSWER_PREFIX, add_special_tokens=False)
    yes, no = (tokenizer.encode(t, add_special_tokens=False) for t in ("Y", "N"))
    if len(yes) != 1 or len(no) != 1:
        raise ValueError(
            "answer_probability needs single-token Y and N (the byte-level tiny model)"
        )
    task, first = get_task(TASK), opening(settings.variant, blank=blank)
    total = 0.0
    was_training = model.training
    model.eval()
    try:
        for item in items:
            probe = _ProbePolicy(settings.variant)
            inspect(item.spectrum, task, probe, opening=first,
                    max_tool_calls=tool_budget(settings.variant), use_tool=use_tool)  # fmt: skip
            inputs = processor.apply_chat_template(
                to_processor_messages(probe.kept[0]), add_generation_prompt=True,
                tokenize=True, return_dict=True, return_tensors="pt",
            )  # fmt: skip
            length = inputs["input_ids"].shape[1]
            for key, value in list(inputs.items()):  # ids, mask, mm_token_type_ids: extend
                if (
                    isinstance(value, torch.Tensor)
                    and value.dim() == 2
                    and value.shape[1] == length
                ):
                    extra = (
                        torch.tensor([prefix])
                        if key == "input_ids"
                        else torch.zeros(1, len(prefix))
                    )
                    fill = torch.ones(1, len(prefix)) if key == "attention_mask" else extra
                    inputs[key] = torch.cat([value, fill.to(value.dtype)], dim=1)
            with torch.no_grad():
                logits = model(**inputs.to(model.device)).logits[0, -1].float()
            pair = torch.softmax(logits[[yes[0], no[0]]], dim=0)
            total += float(pair[0] if item.label == "YES" else pair[1])
    finally:
        model.train(was_training)
    return total / len(items)
