"""Per-step training metrics for the web app's curves (paper Figure 6), sent to a pluggable sink.

``MetricsCallback`` forwards what the trainer logs each step, under stable names: ``loss``,
``reward_mean``/``reward_std``, ``tool_calls_mean`` (calls the tool ran, per trajectory) and
``tool_failure_rate`` (observations without a plot: refused windows and malformed turns too;
both logged by the reward from the environments, since TRL's ``tools/call_frequency`` counts
tool rounds and its ``tools/failure_frequency`` only exceptions),
``response_length_mean`` (model-generated tokens per trajectory, tool tokens excluded),
``batch_f1``/``batch_accuracy`` (from the reward's parsed predictions on this step's rollouts),
``learning_rate``, ``grad_norm``; every other numeric value the trainer logs keeps its TRL name.

``ValidationF1Callback`` measures the validation F1 curve properly: every N steps it inspects a
small labelled set with the current weights through the real inspection loop (an in-memory
``TransformersPolicy``) and records ``val_f1``, ``val_accuracy``, ``val_tool_calls_mean`` and the
F1 again under a name that says what it was measured on: ``val_f1_real`` (the real-data
validation split of ``agent.real_corpus``) or ``val_f1_synthetic`` (SpecVI-mini). Every rank
takes part: the set is sharded over the ranks, which generate in lockstep (the same number of
``generate`` calls per round, ``synced_gpus`` when there are several), and the results are
gathered; so it works under DDP, ZeRO-3 and FSDP without a rank waiting at a barrier.

A sink is anything with ``write(record)``; ``JsonlMetricsSink`` appends JSON lines, and the web
app plugs in a database sink.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from transformers import TrainerCallback

from agent.policies.base import SamplingParams
from agent.policies.transformers_policy import TransformersPolicy

VALIDATION_SOURCES = ("real", "synthetic")

CANONICAL_NAMES = {
    "loss": "loss",
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "completions/mean_length": "response_length_mean",
    "batch_f1": "batch_f1",
    "batch_accuracy": "batch_accuracy",
    "learning_rate": "learning_rate",
    "grad_norm": "grad_norm",
}


@dataclass(frozen=True)
class MetricRecord:
    stage: str  # "sft" | "grpo"
    step: int
    metrics: dict[str, float]
    epoch: float | None = None
    run: str = ""
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricRecord:
        return cls(
            stage=data["stage"],
            step=int(data["step"]),
            metrics={str(k): float(v) for k, v in data["metrics"].items()},
            epoch=data.get("epoch"),
            run=data.get("run", ""),
            time=float(data["time"]),
        )


@runtime_checkable
class MetricsSink(Protocol):
    """Where metric records go (a JSONL file here, a database table in the web app)."""

    def write(self, record: MetricRecord) -> None: ...


class JsonlMetricsSink:
    """Appends one JSON object per record to ``path`` (created with its folder)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: MetricRecord) -> None:
        line = json.dumps(record.to_dict(), sort_keys=True, allow_nan=False)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def read_metrics(path: str | Path) -> list[MetricRecord]:
    """The records of a JSONL metrics file, in the order they were written."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [MetricRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


def canonical_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """Finite numeric log values under their stable names (see the module docstring)."""
    metrics: dict[str, float] = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        metrics[CANONICAL_NAMES.get(key, key)] = float(value)
    return metrics


class MetricsCallback(TrainerCallback):
    """Forwards every trainer log (one per ``logging_steps``) to a sink as a MetricRecord."""

    def __init__(self, sink: MetricsSink, *, stage: str, run: str = "") -> None:
        self.sink, self.stage, self.run = sink, stage, run

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        metrics = canonical_metrics(logs)
        if metrics:
            self.sink.write(
                MetricRecord(self.stage, int(state.global_step), metrics, state.epoch, self.run)
            )


class InMemoryPolicy(TransformersPolicy):
    """``TransformersPolicy`` around a model already in memory (the one being trained), so
    validation prompts and decoding are exactly those of serving."""

    def __init__(
        self, model: Any, processor: Any, *, sampling: SamplingParams, synced_gpus: bool = False
    ) -> None:
        self.model_path = Path(getattr(model, "name_or_path", "") or "in-memory")
        self.device = str(next(model.parameters()).device)
        self.sampling = sampling
        self.max_pixels = None
        self.name = "in-memory:training"
        self.processor = processor
        self.model = model
        self.synced_gpus = synced_gpus
        # What TransformersPolicy.generate reads: one generation at a time, no cache reuse.
        self._init_generation(reuse_cache=False, record_logits=False)
        self._rng_states = None  # validation draws from the trainer's own generator
        self.last_usage = {}

    def _generation_kwargs(self) -> dict[str, Any]:
        kwargs = super()._generation_kwargs()
        if self.synced_gpus:  # ranks keep stepping until all finish (sharded weights)
            kwargs["synced_gpus"] = True
        return kwargs


@dataclass(frozen=True)
class Collectives:
    """What ``agent.evaluation.evaluate_shard`` needs of the process group."""

    rank: int
    world_size: int
    all_max: Callable[[int], int]
    gather: Callable[[list[Any]], list[list[Any]]]


def torch_collectives(device: Any) -> Collectives:
    """Collectives of the current torch.distributed group (one process: trivial ones)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return Collectives(0, 1, lambda n: n, lambda items: [items])

    def all_max(value: int) -> int:
        tensor = torch.tensor([value], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def gather(items: list[Any]) -> list[list[Any]]:
        parts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, items)
        return parts

    return Collectives(dist.get_rank(), dist.get_world_size(), all_max, gather)


def is_zero3(trainer: Any) -> bool:
    """Whether ``trainer`` runs under DeepSpeed ZeRO stage 3 (weights partitioned over ranks)."""
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return False
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return plugin is not None and int(plugin.zero_stage) == 3


def attach_trainer(trainer: Any) -> Any:
    """Give the trainer's validation callbacks the trainer itself (its DeepSpeed engine and
    accelerator), which HF's callback events do not pass; returns the trainer."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, ValidationF1Callback):
            callback.trainer = trainer
    return trainer


class ValidationF1Callback(TrainerCallback):
    """Every ``every_steps`` steps, inspect ``samples`` with the current model and record F1."""

    def __init__(
        self,
        samples: Sequence[Any],  # agent.evaluation.EvalSample
        processor: Any,
        sink: MetricsSink,
        *,
        stage: str,
        every_steps: int,
        max_new_tokens: int = 1024,
        max_tool_calls: int = 8,
        run: str = "",
        source: str = "synthetic",
        use_tool: bool = True,
        collectives: Callable[[Any], Collectives] = torch_collectives,
        gather_zero3: bool = True,
    ) -> None:
        if every_steps <= 0:
            raise ValueError(f"every_steps must be positive; got {every_steps}")
        if not samples:
            raise ValueError("ValidationF1Callback needs at least one labelled sample")
        if source not in VALIDATION_SOURCES:
            raise ValueError(f"source must be one of {VALIDATION_SOURCES}; got {source!r}")
        self.samples = list(samples)
        self.processor, self.sink = processor, sink
        self.stage, self.run, self.source = stage, run, source
        self.every_steps, self.max_tool_calls = every_steps, max_tool_calls
        self.use_tool = use_tool
        self.collectives = collectives
        self.sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
        self.gather_zero3 = gather_zero3
        self.trainer: Any = None  # attach_trainer: the engine and accelerator ZeRO-3 gathers with

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every_steps:
            return
        report = self.evaluate(kwargs["model"])
        if not state.is_world_process_zero:
            return
        tool_calls = [result.n_tool_calls for result in report.samples]
        metrics = {
            "val_f1": report.macro["f1"],
            f"val_f1_{self.source}": report.macro["f1"],
            "val_accuracy": report.macro["accuracy"],
            "val_tool_calls_mean": sum(tool_calls) / len(tool_calls),
            "val_seconds": report.seconds,
        }
        self.sink.write(
            MetricRecord(self.stage, int(state.global_step), metrics, state.epoch, self.run)
        )

    def evaluate(self, model: Any) -> Any:
        from agent.evaluation import evaluate_shard

        was_training = model.training
        model.eval()
        try:
            with self.generation_model(model) as (generating, gathered):
                group = self.collectives(next(generating.parameters()).device)
                # Under ZeRO-3 with partitioned weights every forward all-gathers each layer, so
                # ranks must step together (synced_gpus); once the weights are gathered whole and
                # the engine's hooks are off, each rank decodes on its own.
                policy = InMemoryPolicy(
                    generating,
                    self.processor,
                    sampling=self.sampling,
                    synced_gpus=group.world_size > 1 and not gathered,
                )
                return evaluate_shard(
                    self.samples,
                    policy,
                    rank=group.rank,
                    world_size=group.world_size,
                    all_max=group.all_max,
                    gather=group.gather,
                    benchmark="real-corpus" if self.source == "real" else "specvi-mini",
                    split="validation",
                    use_tool=self.use_tool,
                    max_tool_calls=self.max_tool_calls,
                )
        finally:
            model.train(was_training)

    @contextmanager
    def generation_model(self, model: Any) -> Iterator[tuple[Any, bool]]:
        """The model to decode with, and whether its ZeRO-3 weights were gathered for it.

        Under DeepSpeed ZeRO-3, decoding the partitioned model gathers every layer's weights
        again for every generated token. With ``gather_zero3`` (the default) the weights are
        gathered once for the whole validation pass through TRL's
        ``unwrap_model_for_generation`` (the engine's hooks are lifted meanwhile), at the cost
        of one full copy of the weights per GPU (15 GiB for 7B in bf16); without it, or without
        an attached trainer, the model is used as it is."""
        trainer = self.trainer
        if trainer is None or not self.gather_zero3 or not is_zero3(trainer):
            yield model, False
            return
        from trl.models.utils import unwrap_model_for_generation

        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=True
        ) as unwrapped:
            yield unwrapped, True
