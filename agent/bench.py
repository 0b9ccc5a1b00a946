"""Benchmarks for the agent's hot paths.

    python -m agent.bench render [--windows 40] [--save-dir var/bench]
    python -m agent.bench loop [--episodes 20] [--model-ms 200]
    python -m agent.bench eval-concurrency [--spectra 64] [--latency-ms 300] [--levels 1 8 32]
    python -m agent.bench bombs [--limit-mib 64] [--scale 1.0]

``render`` times SpectralVisualizationTool.render against a tuned matplotlib renderer and the
paper-style one on distinct random windows of real LAMOST spectra (agent.bench_render).

``loop`` measures the rollout loop's own overhead per tool step (parse + render + bookkeeping,
model time excluded) with a scripted policy that answers instantly, states it as a share of a
step whose model answers in ``--model-ms``, and times the rule-based inspector end to end on
SpecVI-mini (spectra per second).

``eval-concurrency`` runs evaluation against a fake OpenAI-compatible server with injected
latency and prints spectra/s at each concurrency level (agent.bench_eval).

``bombs`` reads decompression and parse bombs under a byte limit and prints file size, expanded
size, limit and peak memory per bomb (agent.bench_bombs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from agent.parsing import parse_turn
from agent.spectra import Spectrum

# Full coverage plus typical diagnostic windows, 50-1500 Angstrom wide (rest frame).
_T = TypeVar("_T")

BENCH_WINDOWS: tuple[tuple[str, tuple[float, float]], ...] = (
    ("H-alpha core", (6540.0, 6590.0)),
    ("H-beta", (4820.0, 4900.0)),
    ("H-alpha", (6500.0, 6630.0)),
    ("Ca II H&K", (3900.0, 4050.0)),
    ("C2 Swan 5165", (5050.0, 5250.0)),
    ("H-alpha wide", (6450.0, 6700.0)),
    ("TiO 7054", (6950.0, 7300.0)),
    ("Ca triplet", (8400.0, 8800.0)),
    ("Blue continuum", (4000.0, 4500.0)),
    ("Red continuum", (6000.0, 7000.0)),
    ("Blue half", (3800.0, 5300.0)),
)
FULL_WINDOW_LABEL = "Full spectrum"
LAMOST_LOG10_STEP = 1e-4
BENCH_SEED = 20240601


@dataclass(frozen=True)
class TimingSummary:
    median_ms: float
    p95_ms: float
    calls: int

    @classmethod
    def from_seconds(cls, seconds: Sequence[float]) -> TimingSummary:
        if not seconds:
            raise ValueError("TimingSummary needs at least one timing; got none")
        ms = np.asarray(seconds) * 1000.0
        return cls(float(np.median(ms)), float(np.percentile(ms, 95)), int(ms.size))

    def as_dict(self) -> dict[str, float | int]:
        return {"median_ms": self.median_ms, "p95_ms": self.p95_ms, "calls": self.calls}


# --- spectra ------------------------------------------------------------------------------------


def synthetic_lamost_spectrum(rng: np.random.Generator, index: int) -> Spectrum:
    """A LAMOST-like spectrum: 3700-9100 A log grid (~3900 px), sloped continuum, Balmer and
    metal absorption, an emission line, noise, a masked stretch and a cosmic ray."""
    wavelength = 10 ** np.arange(np.log10(3700.0), np.log10(9100.0), LAMOST_LOG10_STEP)
    temperature_slope = rng.uniform(-2.0, 1.0)
    flux = 800.0 * (wavelength / 6000.0) ** temperature_slope
    for centre, depth, sigma in (
        (3934.8, 0.5, 4.0),
        (3969.6, 0.4, 4.0),
        (4862.7, 0.4, 6.0),
        (5176.7, 0.2, 8.0),
        (6564.6, 0.3, 6.0),
        (8544.4, 0.2, 3.0),
    ):
        flux *= 1.0 - depth * rng.uniform(0.3, 1.0) * np.exp(
            -0.5 * ((wavelength - centre) / sigma) ** 2
        )
    flux += rng.uniform(0.0, 3.0) * flux.mean() * np.exp(-0.5 * ((wavelength - 6564.6) / 10.0) ** 2)
    flux += rng.normal(0.0, flux.mean() / rng.uniform(10.0, 50.0), wavelength.size)
    flux[rng.integers(100, wavelength.size - 100)] += 20.0 * flux.mean()
    mask = np.zeros(wavelength.size, dtype=bool)
    masked_start = int(rng.integers(200, wavelength.size - 300))
    mask[masked_start : masked_start + 25] = True
    return Spectrum(
        wavelength=wavelength,
        flux=flux,
        mask=mask,
        redshift=0.0,
        survey="LAMOST",
        object_id=f"bench-{index}",
        source="agent.bench synthetic",
    )


def bench_spectra(n_spectra: int, seed: int = BENCH_SEED) -> list[Spectrum]:
    rng = np.random.default_rng(seed)
    return [synthetic_lamost_spectrum(rng, index) for index in range(n_spectra)]


# --- timing -------------------------------------------------------------------------------------


def _time_call(function: Callable[[], _T]) -> tuple[float, _T]:
    start = time.perf_counter()
    output = function()
    return time.perf_counter() - start, output


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


# --- parser ------------------------------------------------------------------------------------

PARSE_SIZE = 1_000_000


def pathological_turns(size: int = PARSE_SIZE) -> dict[str, str]:
    """Turns a broken or hostile model could emit, each about `size` characters long."""
    return {
        "long think": "<think>" + "a" * size + "</think><answer>\\boxed{YES}</answer>",
        "many blocks with text": "<think></think>x" * (size // 16),
        "unclosed boxes": "<think>t</think><answer>" + "\\boxed{" * (size // 7),
        "open tags": "<think>" * (size // 7),
        "angle brackets": "<" * size,
        "huge call": "<think>t</think><tool_call>" + "[" * size + "</tool_call>",
        "quotes in call": "<think>t</think><tool_call>" + '"\\' * (size // 2) + "</tool_call>",
    }


def run_parse_benchmark(repeats: int = 3) -> dict[str, Any]:
    """Median parse time per pathological turn, against one pass of `str.count` over it.

    The reference is the cheapest possible linear scan, so the ratio shows how far from linear
    the parser is on each shape (a backtracking regex would show ratios in the thousands).
    """
    rows = []
    for name, text in pathological_turns().items():
        parse_seconds = [_time_call(partial(parse_turn, text))[0] for _ in range(repeats)]
        scan_seconds = [_time_call(partial(text.count, "<"))[0] for _ in range(repeats)]
        parse_median = statistics.median(parse_seconds)
        scan_median = statistics.median(scan_seconds)
        rows.append(
            {
                "turn": name,
                "chars": len(text),
                "parse_ms": parse_median * 1000,
                "scan_ms": scan_median * 1000,
                "ratio": parse_median / max(scan_median, 1e-9),
            }
        )
    return {"repeats": repeats, "rows": rows}


def format_parse_report(summary: dict[str, Any]) -> str:
    lines = [f"parse_turn on pathological turns (median of {summary['repeats']})"]
    lines.append(f"{'turn':<24}{'chars':>10}{'parse ms':>12}{'str.count ms':>14}{'ratio':>10}")
    for row in summary["rows"]:
        lines.append(
            f"{row['turn']:<24}{row['chars']:>10}{row['parse_ms']:>12.1f}"
            f"{row['scan_ms']:>14.2f}{row['ratio']:>10.0f}"
        )
    return "\n".join(lines)


# --- CLI ----------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent.bench", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser(
        "render", help="tool renderer vs tuned and paper-style matplotlib renderers"
    )
    render.add_argument("--windows", type=int, default=40, help="random windows per spectrum")
    render.add_argument("--spectra-dir", type=Path, default=None, help="LAMOST files to render")
    render.add_argument(
        "--save-dir", type=Path, default=Path("var/bench"), help="where one image pair is saved"
    )
    loop = commands.add_parser("loop", help="rollout loop overhead and rule-based throughput")
    loop.add_argument("--episodes", type=int, default=20)
    loop.add_argument("--model-ms", type=float, default=200.0, help="model time per step")
    loop.add_argument("--rule-based-spectra", type=int, default=60)
    parse = commands.add_parser("parse", help="the parser on megabyte-sized pathological turns")
    parse.add_argument("--repeats", type=int, default=3)
    concurrency = commands.add_parser(
        "eval-concurrency", help="evaluation spectra/s vs concurrency on a fake endpoint"
    )
    concurrency.add_argument("--spectra", type=int, default=64)
    concurrency.add_argument("--latency-ms", type=float, default=300.0)
    concurrency.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    bombs = commands.add_parser("bombs", help="peak memory of load_spectra on bombs")
    bombs.add_argument("--limit-mib", type=float, default=64.0, help="max uncompressed MiB")
    bombs.add_argument("--scale", type=float, default=1.0, help="bomb size, 1 = issue 11's")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = make_parser().parse_args(argv)
    if arguments.command == "render":
        from agent.bench_render import format_render_report, run_render_benchmark

        summary = run_render_benchmark(arguments.windows, arguments.spectra_dir, arguments.save_dir)
        print(format_render_report(summary))
    elif arguments.command == "loop":
        summary = run_loop_benchmark(
            arguments.episodes, arguments.model_ms, arguments.rule_based_spectra
        )
        print(format_loop_report(summary))
    elif arguments.command == "parse":
        print(format_parse_report(run_parse_benchmark(arguments.repeats)))
    elif arguments.command == "eval-concurrency":
        from agent.bench_eval import format_eval_concurrency_report, run_eval_concurrency

        summary = run_eval_concurrency(arguments.spectra, arguments.latency_ms, arguments.levels)
        print(format_eval_concurrency_report(summary))
    elif arguments.command == "bombs":
        from agent.bench_bombs import format_bomb_report, run_bomb_benchmark

        limit = int(arguments.limit_mib * 1024 * 1024)
        print(format_bomb_report(run_bomb_benchmark(limit, arguments.scale)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
