"""A DPO checkpoint records the spectra it trained on (``specvet_training_spectra.json``), with
its base checkpoint's, like SFT and GRPO checkpoints do: an evaluation of it then refuses
those spectra (issue 33 item 6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent.splits import SplitMembers, load_training_spectra, save_training_spectra
from tests.training.test_dpo import CPU_CONFIG, write_pairs
from training.dpo import build_dpo_run, parse_args, save_dpo_run


def _with_identities(path: str) -> str:
    """The rows as a preference export writes them: each with its spectrum's object id and
    content hash (annotation.rating.preferences)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    for index, row in enumerate(rows):
        row["spectrum_object_id"] = f"PLOT-{index}"
        row["spectrum_content_hash"] = f"hash-{index}"
    Path(path).write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def test_it_writes_the_dpo_and_base_training_spectra_beside_the_checkpoint(
    tiny_model_path, tmp_path
):
    base = tmp_path / "sft"
    shutil.copytree(tiny_model_path, base)
    save_training_spectra(base, SplitMembers("SFT data", frozenset({"SFT-1"}), frozenset({"s1"})))
    pairs = _with_identities(write_pairs(tmp_path / "pairs", pairs=2, seed=0))
    args = parse_args(
        [
            "--config", str(CPU_CONFIG), "--model_name_or_path", str(base),
            "--output_dir", str(tmp_path / "out"), "--preference_pairs", pairs,
            "--max_steps", "1", "--per_device_train_batch_size", "2",
            "--max_pixels", str(28 * 28 * 4),
        ]
    )  # fmt: skip
    run = build_dpo_run(*args)
    run.trainer.train()
    out = save_dpo_run(run, *args)
    trained = load_training_spectra(out)
    assert trained is not None
    assert trained.object_ids == {"PLOT-0", "PLOT-1", "SFT-1"}
    assert trained.content_hashes == {"hash-0", "hash-1", "s1"}
