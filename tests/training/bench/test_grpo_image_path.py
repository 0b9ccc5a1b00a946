"""The picture reaches GRPO's loss (issue 33: why GRPO stayed flat where SFT learnt).

One step of ``training.grpo`` (TRL's ``GRPOTrainer`` with the agent's environment) on the
picture task, with a reward that alternates inside every group so that every advantage is
nonzero. TRL recomputes the log-probabilities of prompt + completion in ``_compute_loss``; these
tests check, on that very forward, that

- it is given ``pixel_values`` and ``image_grid_thw``, one image per completion, each the
  processor's pixels of the image that completion's prompt showed in the rollout;
- the completions' log-probabilities depend on those pixels (another row's image changes them);
- the loss has a nonzero gradient with respect to ``pixel_values`` (through the frozen vision
  tower and the merger into the language model);
- the advantage lands on the model's tokens with the right sign: after one step the completions
  with a positive advantage are more likely and those with a negative one less likely, and the
  loss mask covers the answer tokens (``tool_mask`` and ``completion_mask`` both 1 there).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from training.bench.learning import (
    PRESETS,
    build_picture_grpo,
    build_picture_model,
    picture_items,
)

GENERATIONS, PROMPTS = 2, 4


def alternating_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1, 0, 1, 0...: each group (``GENERATIONS`` consecutive rollouts) gets one of each."""
    return [float(index % 2 == 0) for index in range(len(completions))]


def _completion_logps(trainer: Any, batch: dict[str, Any], pixel_values: Any = None) -> Any:
    """Sum of the completion's log-probabilities over the loss mask, one per rollout, through
    TRL's own ``_get_per_token_logps_and_entropies`` (the function ``_compute_loss`` calls)."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention, batch["completion_ids"].size(1),
            pixel_values=batch["pixel_values"] if pixel_values is None else pixel_values,
            image_grid_thw=batch["image_grid_thw"], num_images=batch["num_images"],
            mm_token_type_ids=batch["mm_token_type_ids"],
        )  # fmt: skip
    mask = batch["completion_mask"] * batch["tool_mask"]
    return (logps * mask).sum(dim=1)


@pytest.fixture(scope="module")
def one_step(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root: Path = tmp_path_factory.mktemp("grpo_image_path")
        settings = replace(
            PRESETS["cpu"], train_items=PROMPTS, prompts_per_step=PROMPTS,
            num_generations=GENERATIONS, grpo_steps=1, grpo_lr=1e-2,
        )  # fmt: skip
        model = build_picture_model(root / "tiny", settings)
        train = picture_items(PROMPTS, variant="visible", seed=0, split="train")
        run = build_picture_grpo(model, root / "grpo", train, settings)
        trainer = run.trainer
        trainer.reward_funcs = [alternating_reward]
        # The random model's rollouts run to the length limit; TRL's default here (True) would
        # take those out of the loss, and this test wants every rollout in it.
        trainer.mask_truncated_completions = False
        seen: dict[str, Any] = {"loss_forwards": []}
        generate = trainer._generate_and_score_completions

        def keep(inputs: list[dict[str, Any]]) -> dict[str, Any]:
            batch = generate(inputs)
            batch["pixel_values"] = batch["pixel_values"].detach().clone().requires_grad_(True)
            seen["batch"] = dict(batch)
            seen["rows"] = inputs
            seen["before"] = _completion_logps(trainer, batch)
            seen["other_image"] = _completion_logps(
                trainer, batch, _rows_rolled(batch["pixel_values"].detach(), batch)
            )
            return batch

        def spy(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            if torch.is_grad_enabled():
                seen["loss_forwards"].append(dict(kwargs))

        trainer._generate_and_score_completions = keep
        handle = trainer.model.register_forward_pre_hook(spy, with_kwargs=True)
        trainer.train()
        handle.remove()
        seen["after"] = _completion_logps(trainer, seen["batch"])
        seen["processor"] = run.processor
        return seen
    finally:
        torch.set_num_threads(threads)


def _rows_rolled(pixel_values: Any, batch: dict[str, Any]) -> Any:
    """Each rollout given the image of the rollout ``GENERATIONS`` places on (another prompt;
    the rows alternate YES, NO, so the other class); all images have the same grid."""
    per_image = int(batch["image_grid_thw"][0].prod())
    images = pixel_values.reshape(len(batch["num_images"]), per_image, -1)
    return images.roll(GENERATIONS, dims=0).reshape(pixel_values.shape)


def test_it_gives_the_loss_forward_each_rollouts_own_picture(one_step):
    forwards = one_step["loss_forwards"]
    assert forwards, "no forward with gradients: the loss was not computed"
    kwargs = forwards[0]
    assert "pixel_values" in kwargs and "image_grid_thw" in kwargs
    batch = one_step["batch"]
    rollouts = batch["completion_ids"].size(0)
    assert kwargs["image_grid_thw"].shape[0] == rollouts == GENERATIONS * PROMPTS
    # Each rollout's pixels are the processor's pixels of its own prompt's image.
    image_processor = one_step["processor"].image_processor
    per_image = int(kwargs["image_grid_thw"][0].prod())
    for index, row in enumerate(one_step["rows"]):
        (image,) = row["images"]
        expected = image_processor(images=[image], return_tensors="pt")["pixel_values"]
        got = batch["pixel_values"][index * per_image : (index + 1) * per_image].detach()
        torch.testing.assert_close(got, expected.to(got.dtype))


def test_it_makes_the_completions_log_probabilities_depend_on_the_picture(one_step):
    change = (one_step["other_image"] - one_step["before"]).abs()
    assert float(change.max()) > 1e-3, change


def test_it_has_a_loss_gradient_with_respect_to_the_pixels(one_step):
    grad = one_step["batch"]["pixel_values"].grad
    assert grad is not None and float(grad.abs().sum()) > 0


def test_it_raises_positive_advantage_completions_and_lowers_negative_ones(one_step):
    batch = one_step["batch"]
    advantages = batch["advantages"]
    assert bool((advantages != 0).all()), advantages
    mask = batch["completion_mask"] * batch["tool_mask"]
    assert bool((mask.sum(dim=1) > 0).all()), "a rollout with no token in the loss"
    rise = one_step["after"] - one_step["before"]
    assert float(rise[advantages > 0].mean()) > 0 > float(rise[advantages < 0].mean()), (
        rise, advantages,
    )  # fmt: skip
