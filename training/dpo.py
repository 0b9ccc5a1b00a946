"""DPO of the inspection agent on the team's preference pairs (issue 25: training from the loop).

TRL ``DPOTrainer`` on a specvet preference export's ``dpo.jsonl``: TRL's vision DPO rows
(``prompt``, ``chosen``, ``rejected`` as conversational messages, ``images`` filling the prompt's
image placeholders; agent.formats.dpo says how a pair of trajectories becomes one). The
reference model is a frozen copy of the starting weights (TRL's default with ``ref_model=None``;
with ``--use_lora`` the adapter-disabled model).

# GPU: on an export downloaded from the app (unzipped into exports/dpo-v1/)
```bash
python -m training.dpo --config training/configs/dpo_gpu.yaml \\
    --model_name_or_path runs/sft-7b --preference_pairs exports/dpo-v1/dpo.jsonl \\
    --output_dir runs/dpo-7b
```

# CPU smoke run on the tiny random model
```bash
python -m training.tiny_model /tmp/specvet-tiny-qwen25vl
python -m training.dpo --config training/configs/dpo_cpu_tiny.yaml \\
    --preference_pairs exports/dpo-v1/dpo.jsonl
```

The finished checkpoint (weights, processor, chat template, ``specvet_lineage.json``) is written
to ``--output_dir``; per-step metrics go to ``--metrics_jsonl`` (default OUTPUT_DIR/metrics.jsonl).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.splits import SplitMembers
from training.callbacks import MetricsSink, attach_trainer
from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetDPOConfig,
    parse_config,
)
from training.data import TrainingDataError
from training.memory import MemoryEstimate
from training.precision import PrecisionPlan
from training.run import (
    load_model,
    load_training_processor,
    lora_config,
    metrics_sink,
    plan_run,
    run_callbacks,
    run_name,
    save_run,
)

logger = logging.getLogger(__name__)

ROW_KEYS = ("prompt", "chosen", "rejected", "images")


@dataclass
class PreferenceData:
    rows: list[dict[str, Any]]  # prompt, chosen, rejected and PIL images
    version: str  # SHA-256 prefix over the files' bytes and their images
    sources: dict[str, Any]
    # The spectra the rows show (``spectrum_object_id``/``spectrum_content_hash`` of a preference
    # export's rows; rows without them, such as hand-made files, add nothing).
    spectra: SplitMembers = field(
        default_factory=lambda: SplitMembers("DPO data", frozenset(), frozenset())
    )


@dataclass
class DPORun:
    trainer: Any
    processor: Any
    data: PreferenceData
    sink: MetricsSink
    sources: dict[str, Any]
    precision: PrecisionPlan | None = None
    memory: MemoryEstimate | None = None
    recipe: dict[str, Any] = field(default_factory=dict)
    # Written beside the checkpoint with the base checkpoint's own (training.run.save_run), so
    # an SFT -> DPO chain keeps refusing the SFT spectra too.
    training_spectra: SplitMembers | None = None


def _image_count(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for message in messages
        for part in message.get("content") or []
        if isinstance(part, dict) and part.get("type") == "image"
    )


def load_preference_rows(paths: list[str]) -> PreferenceData:
    """The rows of ``dpo.jsonl`` files with their images loaded; a row whose image placeholders
    and images disagree, or whose completions hold an image, is refused with its place."""
    from PIL import Image

    rows: list[dict[str, Any]] = []
    ids: set[str] = set()
    hashes: set[str] = set()
    digest = hashlib.sha256()
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise TrainingDataError(f"preference file {path} does not exist")
        text = path.read_bytes()
        digest.update(text)
        for number, line in enumerate(text.decode("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            row = json.loads(line)
            if not all(key in row for key in ROW_KEYS):
                raise TrainingDataError(f"{where}: a DPO row needs {', '.join(ROW_KEYS)}")
            if _image_count(row["prompt"]) != len(row["images"]):
                raise TrainingDataError(
                    f"{where}: the prompt's image placeholders and images differ"
                )
            if _image_count(row["chosen"]) or _image_count(row["rejected"]):
                raise TrainingDataError(
                    f"{where}: TRL's vision DPO takes images in the prompt only"
                )
            images = []
            for relative in row["images"]:
                png = (path.parent / relative).read_bytes()
                digest.update(hashlib.sha256(png).digest())
                image = Image.open(io.BytesIO(png))
                image.load()
                images.append(image.convert("RGB"))
            rows.append({key: row[key] for key in ROW_KEYS[:3]} | {"images": images})
            if row.get("spectrum_object_id"):
                ids.add(str(row["spectrum_object_id"]))
            if row.get("spectrum_content_hash"):
                hashes.add(str(row["spectrum_content_hash"]))
    if not rows:
        raise TrainingDataError("no DPO data: set preference_pairs to a non-empty dpo.jsonl")
    spectra = SplitMembers("DPO data", frozenset(ids), frozenset(hashes))
    sources = {"preference_pairs": list(paths), "spectra_recorded": len(ids | hashes) > 0}
    return PreferenceData(rows, digest.hexdigest()[:16], sources, spectra)


def build_dpo_run(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetDPOConfig,
    *,
    sink: MetricsSink | None = None,
) -> DPORun:
    """A ready DPOTrainer on the preference rows ``data_args`` names."""
    from datasets import Dataset
    from trl import DPOTrainer

    data = load_preference_rows(list(data_args.preference_pairs))
    precision, memory = plan_run(model_args, data_args, run_args, training_args, stage="dpo")
    processor = load_training_processor(model_args)
    sink = sink or metrics_sink(run_args, training_args.output_dir)
    trainer = DPOTrainer(
        model=load_model(model_args, precision),
        args=training_args,
        train_dataset=Dataset.from_list(data.rows),
        processing_class=processor,
        peft_config=lora_config(model_args),
        callbacks=run_callbacks(
            run_args, processor, sink, stage="dpo", run_name=run_name(training_args, "dpo")
        ),
    )
    attach_trainer(trainer)
    return DPORun(
        trainer, processor, data, sink, dict(data.sources), precision, memory,
        training_spectra=data.spectra,
    )  # fmt: skip


def held_out_margins(run: DPORun, paths: list[str]) -> dict[str, float]:
    """TRL's own preference metrics on held-out pairs (``dpo.jsonl`` files the run did not train
    on): ``rewards/margins`` (beta times how much more the policy than the reference prefers
    chosen over rejected; 0 before any step) and ``rewards/accuracies`` (the share of pairs
    where that margin is positive), from ``DPOTrainer.evaluate``."""
    from datasets import Dataset

    held_out = load_preference_rows(paths)
    # TRL 1.16 names its preference metrics eval_* whatever metric_key_prefix says.
    metrics = run.trainer.evaluate(eval_dataset=Dataset.from_list(held_out.rows))
    return {
        key.removeprefix("eval_"): float(value)
        for key, value in metrics.items()
        if key.startswith(("eval_rewards/", "eval_logps/")) or key == "eval_loss"
    }


def save_dpo_run(
    run: DPORun,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetDPOConfig,
) -> Path:
    """Save the trained model with its lineage into ``training_args.output_dir``."""
    return save_run(
        run,
        model_args,
        data_args,
        run_args,
        training_args,
        stage="dpo",
        dataset_version=run.data.version,
        dataset={"rows": len(run.data.rows), "sources": run.sources},
    )


def main(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetDPOConfig,
) -> Path:
    run = build_dpo_run(model_args, data_args, run_args, training_args)
    run.trainer.train()
    path = save_dpo_run(run, model_args, data_args, run_args, training_args)
    logger.info("DPO checkpoint saved to %s", path)
    return path


def parse_args(args: list[str] | None = None) -> tuple[Any, ...]:
    return parse_config((ModelArguments, DataArguments, RunArguments, SpecvetDPOConfig), args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(*parse_args())
