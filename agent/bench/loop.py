"""The rollout loop's own overhead per tool step, and the rule-based inspector end to end.

    python -m agent.bench loop [--episodes 20] [--model-ms 200] [--rule-based-spectra 60]

A scripted policy answers instantly (tool calls over the bench windows, then an answer), so
what is timed is parse + render + bookkeeping; the overhead is stated as a share of a step
whose model answers in ``--model-ms``. The rule-based inspector is then timed on SpecVI-mini
(spectra per second).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agent.bench.workloads import BENCH_SEED, BENCH_WINDOWS, TimingSummary, bench_spectra

# --- loop -----------------------------------------------------------------------------------------


class _InstantPolicy:
    """Scripted turns (tool calls over the bench windows, then an answer), timing itself."""

    name = "instant"

    def __init__(self, windows: Sequence[tuple[str, tuple[float, float]]]) -> None:
        import json

        self._turns = [
            "<think>inspect</think><tool_call>"
            + json.dumps(
                {
                    "name": "spectral_visualization_tool",
                    "arguments": {"wavelength_range": list(window), "label": label},
                }
            )
            + "</tool_call>"
            for label, window in windows
        ] + ["<think>done</think><answer>\\boxed{NO} nothing found.</answer>"]
        self.policy_seconds = 0.0

    def info(self) -> dict[str, Any]:
        return {"name": self.name}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        started = time.perf_counter()
        turn = sum(1 for message in messages if message["role"] == "assistant")
        text = self._turns[min(turn, len(self._turns) - 1)]
        self.policy_seconds += time.perf_counter() - started
        return text


def run_loop_benchmark(
    episodes: int = 20, model_ms: float = 200.0, rule_based_spectra: int = 60
) -> dict[str, Any]:
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect

    task = get_task("CV")
    windows = BENCH_WINDOWS[:8]
    spectra = bench_spectra(max(1, min(episodes, 5)))
    per_step: list[float] = []
    for episode in range(episodes):
        policy = _InstantPolicy(windows)
        started = time.perf_counter()
        trajectory = inspect(spectra[episode % len(spectra)], task, policy)
        elapsed = time.perf_counter() - started - policy.policy_seconds
        per_step.append(elapsed / len(trajectory.steps))
    overhead = TimingSummary.from_seconds(per_step)
    summary: dict[str, Any] = {
        "episodes": episodes,
        "steps_per_episode": len(windows) + 1,
        "overhead": overhead.as_dict(),
        "model_ms": model_ms,
        "overhead_share": overhead.median_ms / (model_ms + overhead.median_ms),
    }
    summary["rule_based"] = _rule_based_throughput(rule_based_spectra)
    return summary


def _rule_based_throughput(n_spectra: int) -> dict[str, Any] | None:
    if n_spectra <= 0:
        return None
    from agent import synthetic
    from agent.inspection_tasks import get_task
    from agent.policies.rule_based import RuleBasedInspector
    from agent.rollout import inspect

    per_task = max(1, n_spectra // len(synthetic.BENCH_TASKS))
    samples = [
        sample
        for code in synthetic.BENCH_TASKS
        for sample in synthetic.generate_split(
            code,
            "test",
            n_pos=max(1, per_task // 6),
            n_neg=per_task - max(1, per_task // 6),
            seed=BENCH_SEED,
        )
    ]
    policy = RuleBasedInspector()
    started = time.perf_counter()
    steps = 0
    for sample in samples:
        steps += len(inspect(sample.spectrum, get_task(sample.task), policy).steps)
    seconds = time.perf_counter() - started
    return {
        "spectra": len(samples),
        "seconds": seconds,
        "spectra_per_second": len(samples) / seconds,
        "mean_steps": steps / len(samples),
    }


def format_loop_report(summary: dict[str, Any]) -> str:
    overhead = summary["overhead"]
    lines = [
        f"loop benchmark: {summary['episodes']} episodes x {summary['steps_per_episode']} steps "
        "(8 tool calls + answer), model time excluded",
        f"loop overhead per step: median {overhead['median_ms']:.2f} ms, "
        f"p95 {overhead['p95_ms']:.2f} ms",
        f"share of a step whose model answers in {summary['model_ms']:.0f} ms: "
        f"{100 * summary['overhead_share']:.2f}%",
    ]
    rule_based = summary.get("rule_based")
    if rule_based:
        lines.append(
            f"rule-based inspector on SpecVI-mini: {rule_based['spectra']} spectra in "
            f"{rule_based['seconds']:.2f} s = {rule_based['spectra_per_second']:.1f} spectra/s "
            f"({rule_based['mean_steps']:.1f} turns each, tool renders included)"
        )
    return "\n".join(lines)
