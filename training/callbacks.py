"""Per-step training metrics for the web app's curves (paper Figure 6), sent to a pluggable sink.

``MetricsCallback`` forwards what the trainer logs each step, under stable names: ``loss``,
``reward_mean``/``reward_std``, ``tool_calls_mean`` (tool calls per trajectory),
``response_length_mean`` (model-generated tokens per trajectory, tool tokens excluded),
``batch_f1``/``batch_accuracy`` (from the reward's parsed predictions on this step's rollouts),
``learning_rate``, ``grad_norm``; every other numeric value the trainer logs keeps its TRL name.

``ValidationF1Callback`` measures the validation F1 curve properly: every N steps it inspects a
small labelled set with the current weights through ``agent.evaluation.evaluate`` (the real
inspection loop, via an in-memory ``TransformersPolicy``) and records ``val_f1``,
``val_accuracy`` and ``val_tool_calls_mean``. It costs one full rollout per validation
spectrum, so keep the set small; ``batch_f1`` is the free, noisier alternative. It runs on
the main process only, so it suits single-GPU and data-parallel runs, not sharded (ZeRO-3/FSDP)
ones, where the other ranks would wait on generation; use ``batch_f1`` there.

A sink is anything with ``write(record)``; ``JsonlMetricsSink`` appends JSON lines, and the web
app plugs in a database sink.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from transformers import TrainerCallback

from agent.policies.base import SamplingParams
from agent.policies.transformers_policy import END_OF_TURN_TOKENS, TransformersPolicy

CANONICAL_NAMES = {
    "loss": "loss",
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "tools/call_frequency": "tool_calls_mean",
    "tools/failure_frequency": "tool_failure_rate",
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

    def __init__(self, model: Any, processor: Any, *, sampling: SamplingParams) -> None:
        self.model_path = Path(getattr(model, "name_or_path", "") or "in-memory")
        self.device = str(next(model.parameters()).device)
        self.sampling = sampling
        self.max_pixels = None
        self.name = "in-memory:training"
        self.processor = processor
        self.model = model
        tokenizer = processor.tokenizer
        vocabulary = tokenizer.get_vocab()
        self._end_of_turn_ids = [
            tokenizer.convert_tokens_to_ids(token)
            for token in END_OF_TURN_TOKENS
            if token in vocabulary
        ]
        self._image_token_id = processor.image_token_id
        self._rng_states = None
        self.last_usage = {}


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
    ) -> None:
        if every_steps <= 0:
            raise ValueError(f"every_steps must be positive; got {every_steps}")
        if not samples:
            raise ValueError("ValidationF1Callback needs at least one labelled sample")
        self.samples = list(samples)
        self.processor, self.sink = processor, sink
        self.stage, self.run = stage, run
        self.every_steps, self.max_tool_calls = every_steps, max_tool_calls
        self.sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every_steps or not state.is_world_process_zero:
            return
        model = kwargs["model"]
        report = self.evaluate(model)
        tool_calls = [result.n_tool_calls for result in report.samples]
        metrics = {
            "val_f1": report.macro["f1"],
            "val_accuracy": report.macro["accuracy"],
            "val_tool_calls_mean": sum(tool_calls) / len(tool_calls),
            "val_seconds": report.seconds,
        }
        self.sink.write(
            MetricRecord(self.stage, int(state.global_step), metrics, state.epoch, self.run)
        )

    def evaluate(self, model: Any) -> Any:
        from agent.evaluation import evaluate

        was_training = model.training
        model.eval()
        try:
            policy = InMemoryPolicy(model, self.processor, sampling=self.sampling)
            return evaluate(
                self.samples,
                policy,
                benchmark="specvi-mini",
                split="validation",
                max_tool_calls=self.max_tool_calls,
            )
        finally:
            model.train(was_training)
