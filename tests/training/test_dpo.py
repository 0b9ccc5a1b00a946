"""DPO learns the preference the picture decides (issue 33 item 3): on the tiny Qwen2.5-VL,
``training.dpo`` (TRL's DPOTrainer) raises the chosen-over-rejected margin on held-out pairs
whose chosen answer is the right YES/NO for a plot with or without a strong emission line, and
the same run on preferences shuffled against the pictures does not.

Rows are made the project's way: two trajectories per plot (a YES and a NO answer), the right one
chosen, cut by ``agent.formats.dpo.preference_row`` at the answer turn, and written as a
preference export's ``dpo.jsonl`` with its images; chosen and rejected then keep the verdict
alone (the box's content). Margins are TRL's own ``rewards/margins`` and
``rewards/accuracies`` from ``DPOTrainer.evaluate`` on the held-out file (0 before any step: the
reference is the starting model). beta is 1 (TRL's 0.1 scales the tiny model's gradient down
tenfold) and the learning rate constant.

What this does not show: that it is robust. The rise is a late jump (train margin ~0 for 30
steps, then 1.4 and 3.5), and its timing moves with small changes: with the whole answer turn
(27 byte tokens, 24 of them format) the held-out margin was 0.47 at step 48 and 0.07 at step 64
(accuracy 0.5), and with the question worded "A strong emission line?" the train margin had not
left 0 by step 40. CPU runs are deterministic for these seeds on one machine, not across machines:
at 40 steps the held-out margin was 2.55 on one machine and 0.017 on another (both on the code
of c4ddd8b), so the test trains 80 steps (train margin 2.59, all three tests pass there). A GPU
run with more steps, pairs and seeds is the real check.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from agent.formats.dpo import preference_row
from agent.trajectory import ImageRef, SpectrumRef, Step, Trajectory
from training.dpo import build_dpo_run, held_out_margins, parse_args
from training.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "training" / "configs" / "dpo_cpu_tiny.yaml"
WIDTH, HEIGHT = 644, 392  # agent.tool.IMAGE_SIZE
TRAIN_PAIRS, HELD_OUT_PAIRS = 16, 16
STEPS = 80


def plot(emission: bool, rng: random.Random) -> bytes:
    """A noisy flat continuum; with ``emission``, a strong line somewhere along it."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    base = HEIGHT * 0.8
    draw.line([(x, base + rng.uniform(-6, 6)) for x in range(0, WIDTH, 8)], fill="black", width=3)
    if emission:
        centre = rng.uniform(150, 500)
        draw.polygon([(centre - 60, base), (centre, 20), (centre + 60, base)], fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def answered(png: bytes, prediction: str, index: int) -> Trajectory:
    trajectory = Trajectory.new(
        task="CV",
        spectrum=SpectrumRef(f"PLOT-{index}", "SpecVI-mini", "generated"),
        system_prompt="You inspect spectra.",
        user_prompt="<image>Strong emission line?",
        initial_image=ImageRef(png),
    )
    trajectory.steps.append(Step.from_output(0, f"<answer>\\boxed{{{prediction}}}</answer>"))
    trajectory.finalize("answer")
    return trajectory


def verdict_text(yes: bool) -> dict[str, str]:
    return {"type": "text", "text": "YES" if yes else "NO"}


def write_pairs(folder: Path, *, pairs: int, seed: int, shuffled: bool = False) -> str:
    """``pairs`` preference rows, half with an emission line; chosen is the right answer, or,
    ``shuffled``, a balanced answer that has nothing to do with the picture."""
    rng = random.Random(seed)
    (folder / "images").mkdir(parents=True)
    lines = []
    for index in range(pairs):
        emission = index % 2 == 0
        says_yes = (index % 4 < 2) if shuffled else emission
        png = plot(emission, rng)
        yes, no = answered(png, "YES", index), answered(png, "NO", index)
        row = preference_row(yes, no) if says_yes else preference_row(no, yes)
        assert (row.differs_in, row.images) == ("answer", [png])
        (folder / "images" / f"{index}.png").write_bytes(png)
        trl = row.as_trl([f"images/{index}.png"])
        for side, verdict in (("chosen", says_yes), ("rejected", not says_yes)):
            trl[side] = [{"role": "assistant", "content": [verdict_text(verdict)]}]
        lines.append(json.dumps(trl))
    (folder / "dpo.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "dpo.jsonl")


def train(model: Path, pairs: str, held_out: str, output_dir: Path) -> dict[str, Any]:
    args = parse_args(
        [
            "--config",
            str(CPU_CONFIG),
            "--model_name_or_path",
            str(model),
            "--output_dir",
            str(output_dir),
            "--preference_pairs",
            pairs,
            "--learning_rate",
            "1e-2",
            "--lr_scheduler_type",
            "constant",
            "--beta",
            "1.0",
            "--max_steps",
            str(STEPS),
            "--per_device_train_batch_size",
            str(TRAIN_PAIRS),
            "--max_pixels",
            str(28 * 28 * 8),
            "--logging_steps",
            "8",
        ]
    )
    run = build_dpo_run(*args)
    before = held_out_margins(run, [held_out])
    run.trainer.train()
    return {"before": before, "after": held_out_margins(run, [held_out])}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("dpo_learning")
    model = build_tiny_model(root / "model", hidden_size=64, num_attention_heads=2)
    held_out = write_pairs(root / "held_out", pairs=HELD_OUT_PAIRS, seed=999)
    results = {}
    for name, shuffled in (("picture", False), ("shuffled", True)):
        pairs = write_pairs(root / name, pairs=TRAIN_PAIRS, seed=1, shuffled=shuffled)
        results[name] = train(model, pairs, held_out, root / f"out-{name}")
    print(json.dumps(results, indent=1))  # the figures, with -s
    return results


def test_it_starts_from_no_preference(runs):
    for result in runs.values():
        assert result["before"]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)


def test_it_learns_the_preference_the_picture_decides(runs):
    after = runs["picture"]["after"]
    assert after["rewards/margins"] >= 0.5
    assert after["rewards/accuracies"] >= 0.75


def test_it_learns_nothing_held_out_from_preferences_shuffled_against_the_pictures(runs):
    after, learnt = runs["shuffled"]["after"], runs["picture"]["after"]
    assert after["rewards/margins"] < 0.25 * learnt["rewards/margins"]
    assert after["rewards/accuracies"] <= 0.625
