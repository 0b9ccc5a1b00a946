"""Registering a finished checkpoint: weights, processor, chat template and a lineage file.

The saved directory is a plain Qwen2.5-VL checkpoint: LoRA adapters are merged, the configs name
the stock ``Qwen2_5_VLProcessor`` (GPU hosts load the stock processor, CPU hosts fall back to the
image-only one), and the chat template is the project's. So
``agent.policies.build_policy({"kind": "transformers", "model_path": DIR})`` and vLLM load it as
is. ``specvet_lineage.json`` beside the weights says where it came from: base model (and the
base's own lineage, so SFT -> GRPO chains stay readable), dataset version and size, the full
config, code and library versions, and the final training metrics.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.chat_template import load_chat_template
from agent.policies.base import code_version
from agent.render import renderer_info
from agent.tool import IMAGE_SIZE

LINEAGE_FILE = "specvet_lineage.json"
LINEAGE_SCHEMA = 1
STOCK_PROCESSOR_CLASS = "Qwen2_5_VLProcessor"
PROCESSOR_CONFIG_FILES = ("processor_config.json", "tokenizer_config.json")
TRACKED_LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
STAGES = ("sft", "grpo", "dpo")


class LineageError(ValueError):
    """A lineage file that is missing or does not follow the schema."""


@dataclass(frozen=True)
class Lineage:
    stage: str  # "sft" | "grpo" | "dpo"
    base_model: str  # path or name of the checkpoint training started from
    dataset_version: str  # training.data.dataset_version of the training rows
    dataset: dict[str, Any]  # rows, dropped rows, sources
    config: dict[str, Any]  # every config dataclass, JSON-safe
    code_version: str
    chat_template_sha256: str
    created_at: str  # ISO 8601, UTC
    libraries: dict[str, str]
    metrics: dict[str, float] = field(default_factory=dict)  # final training metrics
    base_lineage: dict[str, Any] | None = None  # the base checkpoint's lineage, when it has one
    # What drew the tool images it trained on (older lineages lack it: empty).
    renderer: dict[str, Any] = field(default_factory=dict)
    schema: int = LINEAGE_SCHEMA

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise LineageError(f"lineage stage must be one of {STAGES}; got {self.stage!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Lineage:
        if not isinstance(data, dict):
            raise LineageError(f"lineage must be a JSON object; got {type(data).__name__}")
        if data.get("schema") != LINEAGE_SCHEMA:
            raise LineageError(
                f"lineage schema {data.get('schema')!r} is not supported (expected {LINEAGE_SCHEMA})"
            )
        names = {spec.name for spec in fields(cls)}
        required = {
            spec.name
            for spec in fields(cls)
            if spec.default is MISSING and spec.default_factory is MISSING
        }
        unknown, missing = sorted(set(data) - names), sorted(required - set(data))
        if unknown or missing:
            raise LineageError(f"lineage has unknown keys {unknown} and lacks keys {missing}")
        return cls(**data)


def new_lineage(
    *,
    stage: str,
    base_model: str | Path,
    dataset_version: str,
    dataset: dict[str, Any],
    config: dict[str, Any],
    metrics: dict[str, float] | None = None,
) -> Lineage:
    """A lineage for a checkpoint trained now from ``base_model`` (whose lineage is embedded)."""
    base_path = Path(base_model)
    base_lineage = None
    if (base_path / LINEAGE_FILE).is_file():
        base_lineage = load_lineage(base_path).to_dict()
    return Lineage(
        stage=stage,
        base_model=str(base_model),
        dataset_version=dataset_version,
        dataset=dataset,
        config=config,
        code_version=code_version(),
        chat_template_sha256=hashlib.sha256(load_chat_template().encode()).hexdigest(),
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        libraries=_library_versions(),
        metrics=dict(metrics or {}),
        base_lineage=base_lineage,
        renderer=renderer_info(IMAGE_SIZE),
    )


def save_checkpoint(model: Any, processor: Any, output_dir: str | Path, lineage: Lineage) -> Path:
    """Write weights (LoRA merged), processor, chat template and lineage into ``output_dir``."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):  # a peft model: ship plain weights
        model = model.merge_and_unload()
    model.save_pretrained(out)
    return write_serving_files(processor, out, lineage)


def write_serving_files(processor: Any, output_dir: str | Path, lineage: Lineage) -> Path:
    """Processor (stock class names), the project chat template and the lineage, beside weights."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    processor.chat_template = load_chat_template()
    processor.save_pretrained(out)
    for name in PROCESSOR_CONFIG_FILES:
        _clean_processor_config(out / name)
    (out / LINEAGE_FILE).write_text(
        json.dumps(lineage.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    return out


def save_trained(trainer: Any, processor: Any, output_dir: str | Path, lineage: Lineage) -> Path:
    """``save_checkpoint`` for a trainer on any number of processes; every rank calls it.

    Sharded weights (ZeRO-3, FSDP, on any number of processes, one included) are gathered by
    ``trainer.save_model``, a collective that writes on the main process; LoRA adapters are
    merged (single-GPU or data-parallel runs; the LoRA recipe is one GPU). The main process then
    writes the serving files.
    """
    out = Path(output_dir)
    model = trainer.model
    if hasattr(model, "merge_and_unload") or not _holds_shards(trainer):
        if trainer.args.should_save:
            save_checkpoint(model, processor, out, lineage)
    else:
        trainer.save_model(str(out))
        if trainer.args.should_save:
            write_serving_files(processor, out, lineage)
    trainer.accelerator.wait_for_everyone()
    return out


def _holds_shards(trainer: Any) -> bool:
    """FSDP and DeepSpeed keep the weights in shards even on one process (FSDP2's are DTensors
    that ``save_pretrained`` cannot write: "invalid python storage" on an H200); only the
    trainer's ``save_model`` gathers them, so the number of processes does not decide."""
    return bool(
        getattr(trainer, "is_fsdp_enabled", False)
        or getattr(trainer, "is_deepspeed_enabled", False)
    )


def load_lineage(path: str | Path) -> Lineage:
    """The lineage of a checkpoint directory (or of a lineage JSON file)."""
    path = Path(path)
    file = path / LINEAGE_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise LineageError(f"{file} does not exist; this checkpoint was not registered") from error
    except (OSError, json.JSONDecodeError) as error:
        raise LineageError(f"cannot read lineage {file}: {error}") from error
    return Lineage.from_dict(data)


def _clean_processor_config(path: Path) -> None:
    """Name the stock processor class and drop training-only parser settings."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if "processor_class" in config:
        config["processor_class"] = STOCK_PROCESSOR_CLASS
    config.pop("response_template", None)
    config.pop("response_schema", None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
