"""Benchmarks for the agent's hot paths.

    python -m agent.bench render [--repeats 5] [--spectra 3]
    python -m agent.bench loop [--episodes 20] [--model-ms 200]

``render`` times SpectralVisualizationTool.render against a reference renderer written the way
the public Spec-o3 tool draws its views (matplotlib Agg, a new 8x5 in figure at 80 dpi per call,
tight bounding box), on the same synthetic LAMOST-like spectra and the same windows, in one run.

``loop`` measures the rollout loop's own overhead per tool step (parse + render + bookkeeping,
model time excluded) with a scripted policy that answers instantly, states it as a share of a
step whose model answers in ``--model-ms``, and times the rule-based inspector end to end on
SpecVI-mini (spectra per second).
"""

from __future__ import annotations

import argparse
import functools
import io
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from agent.parsing import parse_turn
from agent.spectra import Spectrum
from agent.tool import IMAGE_SIZE, SpectralVisualizationTool

# Full coverage plus typical diagnostic windows, 50-1500 Angstrom wide (rest frame).
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


def bench_windows(
    spectrum: Spectrum, max_windows: int | None = None
) -> list[tuple[str, tuple[float, float]]]:
    """Full coverage first, then the diagnostic windows."""
    good_wavelength = spectrum.wavelength[spectrum.good] / (1.0 + spectrum.redshift)
    full = (float(good_wavelength[0]), float(good_wavelength[-1]))
    windows = [(FULL_WINDOW_LABEL, full), *BENCH_WINDOWS]
    return windows if max_windows is None else windows[:max_windows]


# --- reference renderer -------------------------------------------------------------------------


def reference_render(
    spectrum: Spectrum, wavelength_range: tuple[float, float], label: str
) -> bytes:
    """How the public Spec-o3 tool draws a view: a fresh matplotlib figure for every call."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo, hi = wavelength_range
    rest = spectrum.wavelength / (1.0 + spectrum.redshift)
    inside = (rest >= lo) & (rest <= hi)
    figure, axes = plt.subplots(figsize=(8, 5), dpi=80)
    try:
        axes.plot(rest[inside], spectrum.flux[inside])
        axes.minorticks_on()
        axes.grid(True)
        axes.set_title(f"{label} {lo:.0f}-{hi:.0f} Å")
        axes.set_xlabel("Wavelength (Å)")
        axes.set_ylabel("Flux")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
    finally:
        plt.close(figure)
    return buffer.getvalue()


# --- timing -------------------------------------------------------------------------------------


def _time_call(function: Callable[[], bytes | None]) -> tuple[float, bytes | None]:
    start = time.perf_counter()
    output = function()
    return time.perf_counter() - start, output


def _tool_png(
    tool: SpectralVisualizationTool, window: tuple[float, float], label: str
) -> bytes | None:
    return tool.render(window, label).png


def run_render_benchmark(
    repeats: int = 5, n_spectra: int = 3, max_windows: int | None = None
) -> dict[str, Any]:
    """Time both renderers on the same spectra and windows; returns a JSON-ready summary.

    Uncached: every call renders (ours with a cache-less tool, built outside the timed call).
    Cached: the same request repeated; ours answers from its LRU cache, the reference has none.
    """
    if repeats < 1 or n_spectra < 1:
        raise ValueError(f"repeats and n_spectra must be >= 1; got {repeats} and {n_spectra}")
    timings: dict[str, dict[str, list[float]]] = {
        name: {"uncached": [], "cached": []} for name in ("ours", "reference")
    }
    sizes: dict[str, list[tuple[tuple[int, int], int]]] = {"ours": [], "reference": []}
    init_seconds: list[float] = []
    spectra = bench_spectra(n_spectra)
    # Warm-up outside the timings: font loading, matplotlib import and its font cache.
    warm_label, warm_window = bench_windows(spectra[0])[1]
    SpectralVisualizationTool(spectra[0]).render(warm_window, warm_label)
    reference_render(spectra[0], warm_window, warm_label)

    for spectrum in spectra:
        start = time.perf_counter()
        cached_tool = SpectralVisualizationTool(spectrum)
        init_seconds.append(time.perf_counter() - start)
        uncached_tool = SpectralVisualizationTool(spectrum, cache_size=0)
        for label, window in bench_windows(spectrum, max_windows):
            reference = functools.partial(reference_render, spectrum, window, label)
            renderers = {
                "ours": (
                    functools.partial(_tool_png, uncached_tool, window, label),
                    functools.partial(_tool_png, cached_tool, window, label),
                ),
                "reference": (reference, reference),
            }
            cached_tool.render(window, label)  # prime the cache
            for name, (uncached, cached) in renderers.items():
                for _ in range(repeats):
                    seconds, png = _time_call(uncached)
                    timings[name]["uncached"].append(seconds)
                    sizes[name].append(_png_size(png))
                    timings[name]["cached"].append(_time_call(cached)[0])

    summary: dict[str, Any] = {
        "config": {
            "repeats": repeats,
            "spectra": n_spectra,
            "windows": len(bench_windows(spectra[0], max_windows)),
        },
        "tool_init_ms": TimingSummary.from_seconds(init_seconds).as_dict(),
    }
    for name in ("ours", "reference"):
        summary[name] = {
            mode: TimingSummary.from_seconds(values).as_dict()
            for mode, values in timings[name].items()
        }
        summary[name]["image_sizes"] = sorted({dimensions for dimensions, _ in sizes[name]})
        summary[name]["png_bytes_median"] = int(statistics.median(n for _, n in sizes[name]))
    summary["speedup_uncached"] = (
        summary["reference"]["uncached"]["median_ms"] / summary["ours"]["uncached"]["median_ms"]
    )
    summary["speedup_cached"] = (
        summary["reference"]["cached"]["median_ms"] / summary["ours"]["cached"]["median_ms"]
    )
    return summary


def _png_size(png: bytes | None) -> tuple[tuple[int, int], int]:
    if png is None:
        raise RuntimeError("a benchmark render returned no image")
    with Image.open(io.BytesIO(png)) as image:
        return (image.width, image.height), len(png)


def _size_span(sizes: list[tuple[int, int]]) -> str:
    """'644x392', or '556-570x378' when a tight bounding box varies the size."""
    widths = sorted({width for width, _ in sizes})
    heights = sorted({height for _, height in sizes})

    def span(values: list[int]) -> str:
        return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"

    return f"{span(widths)}x{span(heights)}"


def format_render_report(summary: dict[str, Any]) -> str:
    config = summary["config"]
    lines = [
        f"render benchmark: {config['spectra']} spectra x {config['windows']} windows x "
        f"{config['repeats']} repeats (tool init median {summary['tool_init_ms']['median_ms']:.2f} ms)",
        f"{'renderer':<11}{'mode':<10}{'median ms':>10}{'p95 ms':>10}{'calls':>7}  "
        f"{'image px':<14}{'PNG bytes':>10}",
    ]
    for name in ("ours", "reference"):
        sizes = _size_span(summary[name]["image_sizes"])
        for mode in ("uncached", "cached"):
            timing = summary[name][mode]
            lines.append(
                f"{name:<11}{mode:<10}{timing['median_ms']:>10.3f}{timing['p95_ms']:>10.3f}"
                f"{timing['calls']:>7}  {sizes:<14}{summary[name]['png_bytes_median']:>10}"
            )
    lines.append(
        f"speed-up (reference median / ours median): uncached {summary['speedup_uncached']:.1f}x, "
        f"cached {summary['speedup_cached']:.0f}x; our image size is {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]}"
    )
    return "\n".join(lines)


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
    from agent.rollout import inspect
    from agent.tasks import get_task

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
    from agent.policies.rule_based import RuleBasedInspector
    from agent.rollout import inspect
    from agent.tasks import get_task

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
        parse_seconds = [
            _time_call(lambda t=text: parse_turn(t) and None)[0] for _ in range(repeats)
        ]
        scan_seconds = [_time_call(lambda t=text: t.count("<") and None)[0] for _ in range(repeats)]
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
    render = commands.add_parser("render", help="tool renderer vs the matplotlib reference")
    render.add_argument("--repeats", type=int, default=5, help="timed calls per window and mode")
    render.add_argument("--spectra", type=int, default=3, help="synthetic spectra to render")
    render.add_argument("--windows", type=int, default=None, help="use only the first N windows")
    loop = commands.add_parser("loop", help="rollout loop overhead and rule-based throughput")
    loop.add_argument("--episodes", type=int, default=20)
    loop.add_argument("--model-ms", type=float, default=200.0, help="model time per step")
    loop.add_argument("--rule-based-spectra", type=int, default=60)
    parse = commands.add_parser("parse", help="the parser on megabyte-sized pathological turns")
    parse.add_argument("--repeats", type=int, default=3)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = make_parser().parse_args(argv)
    if arguments.command == "render":
        summary = run_render_benchmark(arguments.repeats, arguments.spectra, arguments.windows)
        print(format_render_report(summary))
    elif arguments.command == "loop":
        summary = run_loop_benchmark(
            arguments.episodes, arguments.model_ms, arguments.rule_based_spectra
        )
        print(format_loop_report(summary))
    elif arguments.command == "parse":
        print(format_parse_report(run_parse_benchmark(arguments.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
