"""Which dtype the trained weights live in, decided before the model is loaded.

Qwen2.5-VL checkpoints are stored in bf16, and ``dtype="auto"`` keeps that. The HF Trainer never
upcasts: with full fine-tuning on one process (or plain data parallel) the weights, their
gradients and AdamW's states are then bf16, whose 8-bit mantissa rounds away every update below
about 1/256 of a weight. At lr 1e-6 almost nothing moves (issue 24: 2.0 % of weights and no norm
layer after 3 SFT steps, against 84.5 % in fp32).

The plan here: full fine-tuning outside ZeRO-3/FSDP keeps **fp32 master weights** (the
checkpoint is loaded in float32) and computes in bf16 through the trainer's autocast
(``bf16: true``); the saved checkpoint is cast back to the checkpoint's own dtype. An explicit
``dtype: bfloat16``/``float16`` for such a run is refused with the reason and the memory figures.
ZeRO-3 and FSDP keep their own fp32 copy, and LoRA adapters are fp32 (peft's
``autocast_adapter_dtype``) on a frozen bf16 base, so those keep the checkpoint's dtype.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LOW_PRECISION = ("bfloat16", "float16")
GIB = 1024**3


class PrecisionError(ValueError):
    """A run whose trained weights would be stored in a dtype that rounds updates away."""


@dataclass(frozen=True)
class PrecisionPlan:
    checkpoint_dtype: str  # what the checkpoint stores
    load_dtype: str  # what the weights are loaded (and kept and updated) in
    compute: str  # "bf16 autocast", "fp16 autocast" or "fp32"
    save_dtype: str  # what the trained checkpoint is written in
    master_weights: str  # where the fp32 copy that receives the updates lives
    reason: str

    @property
    def upcast(self) -> bool:
        return self.load_dtype != self.checkpoint_dtype

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def checkpoint_dtype(path: str | Path) -> str:
    """The dtype a checkpoint's ``config.json`` says its weights are stored in (float32 if none)."""
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    text_config = config.get("text_config") or {}
    for source in (config, text_config):
        for key in ("dtype", "torch_dtype"):
            if isinstance(source.get(key), str):
                return str(source[key])
    return "float32"


def precision_plan(
    *,
    checkpoint: str,
    requested_dtype: str,
    use_lora: bool,
    sharded: bool,
    bf16: bool,
    fp16: bool = False,
    trainable_parameters: int | None = None,
) -> PrecisionPlan:
    """The dtypes of a run; raises PrecisionError for full fine-tuning of low-precision weights
    without a sharded engine's fp32 copy when the dtype was asked for explicitly."""
    compute = "bf16 autocast" if bf16 else "fp16 autocast" if fp16 else "fp32"
    requested = checkpoint if requested_dtype == "auto" else requested_dtype
    if use_lora:
        return PrecisionPlan(
            checkpoint, requested, compute, requested, "LoRA adapters (peft keeps them float32)",
            "LoRA: the base stays frozen in its dtype; only the fp32 adapters receive updates",
        )  # fmt: skip
    if sharded:
        return PrecisionPlan(
            checkpoint, requested, compute, requested, "ZeRO-3/FSDP optimizer (float32 copy)",
            "ZeRO-3/FSDP keep an fp32 master copy of the shards and update that",
        )  # fmt: skip
    if requested not in LOW_PRECISION:
        return PrecisionPlan(
            checkpoint, requested, compute, checkpoint, f"the model ({requested})",
            f"full fine-tuning updates the {requested} weights directly",
        )  # fmt: skip
    if requested_dtype != "auto":
        raise PrecisionError(full_fine_tuning_refusal(requested_dtype, trainable_parameters))
    return PrecisionPlan(
        checkpoint, "float32", compute, checkpoint, "the model (float32)",
        f"full fine-tuning on one process or plain data parallel: the {checkpoint} checkpoint is "
        "loaded in float32 so updates at lr 1e-6 are not rounded away; compute runs in "
        f"{compute}; the checkpoint is saved in {checkpoint} again",
    )  # fmt: skip


def full_fine_tuning_refusal(dtype: str, trainable_parameters: int | None) -> str:
    figures = ""
    if trainable_parameters:
        low = trainable_parameters * 8 / GIB
        high = trainable_parameters * 16 / GIB
        figures = (
            f" Memory for {trainable_parameters / 1e9:.2f} B trainable parameters: {dtype} "
            f"weights + gradients + AdamW states = 8 B/parameter = {low:.1f} GiB; fp32 master "
            f"weights = 16 B/parameter = {high:.1f} GiB, before activations."
        )
    return (
        f"dtype {dtype!r} with full fine-tuning outside ZeRO-3/FSDP stores the weights, gradients "
        f"and AdamW states in {dtype}, whose 8-bit mantissa rounds away every update below about "
        "1/256 of a weight (at lr 1e-6 almost no weight moves). Use dtype 'auto' (fp32 master "
        "weights, bf16 compute with bf16: true), use_lora: true, or ZeRO-3/FSDP "
        "(training/configs/accelerate)." + figures
    )


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)
