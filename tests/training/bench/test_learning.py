"""Learning that depends on the picture (issue 33): the benchmark's task gives the answer only in
the image, a constant answer earns exactly chance, the constant-reward control pays what an
untrained model earns, and SFT on a reduced configuration learns from the picture while the
controls (images swapped between classes, blank images) do not."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from training.bench.learning import (
    PRESETS,
    UNTRAINED_REWARD,
    answer_probability,
    build_picture_grpo,
    build_picture_model,
    constant_reward,
    demonstrations,
    picture_items,
    right_on_every_seed,
    run_seed,
    shuffled_labels,
    swapped,
    verdicts,
)


@pytest.mark.parametrize("variant", ["visible", "zoom"])
def test_it_gives_the_answer_only_in_the_picture(variant):
    items = picture_items(8, variant=variant, seed=0, split="train")
    assert [item.label for item in items] == ["YES", "NO"] * 4  # 50/50 in every even batch
    trajectories = demonstrations(items, variant)
    assert len({t.system_prompt for t in trajectories}) == 1
    assert len({t.user_prompt for t in trajectories}) == 1
    assert "YES" not in trajectories[0].user_prompt + trajectories[0].system_prompt
    # A constant answer earns exactly chance.
    labels = [item.label for item in items]
    assert sum(label == "YES" for label in labels) / len(labels) == 0.5


def test_it_keeps_train_and_held_out_spectra_apart():
    train = picture_items(16, variant="visible", seed=0, split="train")
    held_out = picture_items(16, variant="visible", seed=0, split="eval")
    digests = {item.spectrum.flux.tobytes() for item in train}
    assert not digests & {item.spectrum.flux.tobytes() for item in held_out}
    assert [i.label for i in swapped(held_out)] == [i.label for i in held_out]
    assert all(
        a.spectrum is not b.spectrum for a, b in zip(swapped(held_out), held_out, strict=True)
    )


def test_it_gives_every_picture_both_answers_in_the_shuffled_control():
    """Each picture is labelled YES once and NO once, so no function of the picture predicts
    the label (a permutation, or half of each class relabelled, still gave each picture one
    label to memorise; held-out came out 1.00 on seed 2). Labels still alternate YES, NO."""
    items = picture_items(8, variant="visible", seed=0, split="train")
    mixed = shuffled_labels(items, 0)
    assert [m.label for m in mixed] == ["YES", "NO"] * 8
    by_picture: dict[bytes, list[str]] = {}
    for row in mixed:
        by_picture.setdefault(row.spectrum.flux.tobytes(), []).append(row.label)
    assert len(by_picture) == len(items)
    assert all(sorted(labels) == ["NO", "YES"] for labels in by_picture.values())


def _model_view(png: bytes) -> np.ndarray:
    """The picture at the tiny model's input size (140 x 84), grey levels."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(
            image.convert("L").resize((140, 84), Image.Resampling.BICUBIC), dtype=float
        )


def test_it_hides_the_zoom_variant_feature_from_the_first_image():
    """In ``zoom`` the classes differ in the H-alpha window the tool renders, not in I0: the
    mean difference between classes is far larger zoomed than in I0."""
    from agent.tool import SpectralVisualizationTool

    items = picture_items(8, variant="zoom", seed=0, split="train")
    tools = [SpectralVisualizationTool(item.spectrum) for item in items]
    full = [_model_view(tool.render_full().png or b"") for tool in tools]
    zoom = [_model_view(tool.render([6500, 6630]).png or b"") for tool in tools]

    def class_gap(views: list[np.ndarray]) -> float:
        yes = np.mean(views[0::2], axis=0)
        no = np.mean(views[1::2], axis=0)
        return float(np.abs(yes - no).mean())

    assert class_gap(zoom) > 3 * class_gap(full)


def test_it_pays_the_constant_reward_control_what_an_untrained_model_earns():
    """Not 1.0 (advantages exactly 0, a control that proves nothing): -0.2, eq. 3 for a rollout
    without an answer, where float32 group means are off by an ulp and AdamW still moves."""
    from training.rewards import spec_o3_reward

    untrained = spec_o3_reward([[{"role": "assistant", "content": "x!q"}]], ground_truth=["YES"])
    assert untrained == [UNTRAINED_REWARD] == [-0.2]
    assert constant_reward([[], [], []]) == [-0.2, -0.2, -0.2]


GRPO_PRESETS = sorted(name for name, preset in PRESETS.items() if "grpo" in preset.stages)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["reduced", *GRPO_PRESETS])
def test_it_gives_every_grpo_step_half_yes_half_no(tmp_path: Path, preset: str):
    """TRL's own sampler, in dataset order, at each GRPO preset's own sizes (``grpo_cpu``: 16
    prompts x 8 rollouts): each step's prompts (generation batch) are 50/50, so a model that
    answers one way whatever the picture earns exactly chance, and TRL takes the preset's
    batch (prompts x rollouts) as it is."""
    if preset == "reduced":
        settings = replace(PRESETS["cpu"], train_items=16, prompts_per_step=4, num_generations=2)
    else:
        settings = replace(PRESETS[preset], device="cpu")
    model = build_picture_model(tmp_path / "tiny", settings)
    train = picture_items(settings.train_items, variant=settings.variant, seed=0, split="train")
    run = build_picture_grpo(model, tmp_path / "grpo", train, settings)
    assert run.trainer.num_generations == settings.num_generations
    labels = run.trainer.train_dataset["ground_truth"]
    indices = list(iter(run.trainer._get_train_sampler()))
    step = settings.prompts_per_step * settings.num_generations
    assert len(indices) >= 2 * step
    for start in range(0, len(indices) - step + 1, step):
        answers = [labels[i] for i in indices[start : start + step]]
        assert answers.count("YES") == answers.count("NO"), (start, answers)


@pytest.fixture
def one_thread():
    """The tiny model on one torch thread: on a shared machine spinning threads cost 5-15x."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["visible", "zoom"])
def test_it_reads_the_answer_probability_at_the_decision(
    tmp_path: Path, one_thread: None, variant: str
):
    """P(true answer) of an item and of the same item with the other label add up to 1 (the
    probe scores Y against N at the one token that decides), and for ``zoom`` the decision is
    read after the zoom call's plot: the conversation scored holds both pictures."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from agent.policies.qwen_processor import load_processor
    from training.bench import learning

    settings = replace(PRESETS["test"], variant=variant)
    path = build_picture_model(tmp_path / "tiny", settings)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
    processor = load_processor(path)
    items = picture_items(4, variant=variant, seed=0, split="eval")
    flipped = [
        learning.Item(item.spectrum, "NO" if item.label == "YES" else "YES") for item in items
    ]
    p_true = answer_probability(model, processor, items, settings)
    p_flipped = answer_probability(model, processor, flipped, settings)
    assert 0.0 < p_true < 1.0
    assert p_true + p_flipped == pytest.approx(1.0, abs=1e-5)
    probe = learning._ProbePolicy(variant)
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect

    inspect(items[0].spectrum, get_task(learning.TASK), probe,
            opening=learning.opening(variant), max_tool_calls=learning.tool_budget(variant))  # fmt: skip
    pictures = sum(
        part["type"] == "image" for message in probe.kept[0] for part in message["content"]
    )
    assert pictures == (2 if variant == "zoom" else 1)


@pytest.mark.slow
def test_it_learns_from_the_picture_by_sft_and_not_from_swapped_or_shuffled(
    tmp_path: Path, one_thread: None
):
    settings = PRESETS["test"]
    result = run_seed(tmp_path, settings, log=lambda line: None)
    sft = result["sft"]
    assert sft["p_before"] < settings.p_threshold, sft
    assert sft["after"] >= settings.threshold, sft
    assert sft["p_after"] > 0.5, sft  # the sign; the margin is small (see the guide)
    assert sft["controls"]["swapped"]["accuracy"] <= 1 - settings.threshold, sft  # flips
    assert sft["controls"]["shuffled"]["p_true"] < settings.p_threshold, sft
    assert set(result["verdicts"]) == {"sft_learnt", "sft_swapped_held", "sft_shuffled_held"}
    assert all(result["verdicts"].values()), result["verdicts"]


def _figures(before, after, p_before, p_after, **controls):
    return {
        "before": before, "after": after, "p_before": p_before, "p_after": p_after,
        "controls": {name: {"accuracy": a, "p_true": p} for name, (a, p) in controls.items()},
    }  # fmt: skip


def test_it_fails_a_verdict_when_a_control_learns():
    settings = replace(PRESETS["test"], threshold=0.85, p_threshold=0.52)
    result = {
        "sft": _figures(0.0, 0.9, 0.5, 0.9, swapped=(0.1, 0.1), blank=(0.5, 0.5),
                        shuffled=(1.0, 0.9)),
        "grpo": _figures(0.5, 0.9, 0.5, 0.9, swapped=(0.9, 0.6), constant_reward=(1.0, 0.8)),
    }  # fmt: skip
    assert verdicts(result, settings) == {
        "sft_learnt": True,
        "sft_swapped_held": True,
        "sft_blank_held": True,
        "sft_shuffled_held": False,  # the control learnt
        "grpo_learnt": True,
        "grpo_swapped_held": False,  # the answer did not follow the picture
        "grpo_constant_reward_held": False,
    }


def test_it_does_not_take_a_lucky_greedy_answer_for_learning():
    """An indifferent model (P(true) ~1/2 everywhere) whose greedy answers happen to follow the
    picture, as the format checkpoint's did with the sign reversed (0.12), has not learnt; and
    a control at P(true) 1/2 is at chance whatever its greedy accuracy."""
    settings = PRESETS["cpu"]
    result = {
        "grpo": _figures(0.12, 0.88, 0.5, 0.49, shuffled=(1.0, 0.51)),
        "sft": _figures(0.88, 1.0, 0.7, 0.99),  # started above chance
    }
    out = verdicts(result, settings)
    assert out["grpo_learnt"] is False  # right greedy answers, but the tilt is the other way
    assert out["grpo_shuffled_held"] is True
    assert out["sft_learnt"] is False


def test_it_fails_a_control_whose_greedy_answers_are_right_on_every_seed():
    """A control can be right on one seed by chance (the sign of an indifferent model's tilt),
    not on every seed: that is how the leaking shuffled control would show (1.00 on seed 2)."""
    settings = PRESETS["cpu"]

    def run(shuffled: float) -> dict:
        return {"sft": _figures(0.0, 1.0, 0.5, 0.51, swapped=(0.0, 0.49), shuffled=(shuffled, 0.5))}

    assert right_on_every_seed([run(0.12), run(0.16), run(1.0)], settings) == []
    assert right_on_every_seed([run(1.0), run(0.94), run(1.0)], settings) == [
        "sft_shuffled_right_on_every_seed"
    ]
    assert right_on_every_seed([run(1.0)], settings) == []  # one seed cannot tell


def test_it_builds_the_picture_model_at_the_weight_scale_asked(tmp_path: Path):
    """``initializer_range`` reaches the tiny model (the grpo_cpu preset's 0.1); 0 keeps
    transformers' default, so the other presets' model is unchanged."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    def weight_std(settings) -> float:
        path = build_picture_model(tmp_path / str(settings.initializer_range), settings)
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
        return float(model.model.visual.blocks[0].attn.qkv.weight.detach().std())

    assert PRESETS["cpu"].initializer_range == 0.0
    default, wide = weight_std(PRESETS["cpu"]), weight_std(PRESETS["grpo_cpu"])
    assert default == pytest.approx(0.02, rel=0.2)
    assert wide == pytest.approx(0.1, rel=0.2)
