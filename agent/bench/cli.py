"""The agent-side benchmarks' command line (plain Python, no Django).

    python -m agent.bench render [--windows 40] [--save-dir var/bench]
    python -m agent.bench loop [--episodes 20] [--model-ms 200]
    python -m agent.bench parse [--repeats 3]
    python -m agent.bench eval-concurrency [--spectra 64] [--latency-ms 300] [--levels 1 8 32]
    python -m agent.bench bombs [--limit-mib 64] [--scale 1.0]
    python -m agent.bench kv-reuse [--spectra 4] [--turns 3] [--max-new-tokens 16]
    python -m agent.bench.real [calibrate]

``render`` times SpectralVisualizationTool.render against a tuned matplotlib renderer and the
paper-style one on distinct random windows of real LAMOST spectra (agent.bench.render).

``loop`` measures the rollout loop's own overhead per tool step (parse + render + bookkeeping,
model time excluded) with a scripted policy that answers instantly, states it as a share of a
step whose model answers in ``--model-ms``, and times the rule-based inspector end to end on
SpecVI-mini (spectra per second) (agent.bench.loop).

``parse`` times the parser on megabyte-sized pathological turns (agent.bench.parse).

``eval-concurrency`` runs evaluation against a fake OpenAI-compatible server with injected
latency and prints spectra/s at each concurrency level (agent.bench.eval_concurrency).

``bombs`` reads decompression and parse bombs under a byte limit and prints file size, expanded
size, limit and peak memory per bomb (agent.bench.bombs).

``kv-reuse`` prints prefill tokens and seconds per episode of the tiny Qwen2.5-VL with and
without key-value cache reuse across turns, after checking both give the same tokens
(agent.bench.kv_reuse).

``agent.bench.real`` has its own command line: the rule-based inspector on the real corpus.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


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
    kv_reuse = commands.add_parser("kv-reuse", help="prefill with and without KV-cache reuse")
    kv_reuse.add_argument("--spectra", type=int, default=4)
    kv_reuse.add_argument("--turns", type=int, default=3, help="tool plots per episode")
    kv_reuse.add_argument("--max-new-tokens", type=int, default=16)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = make_parser().parse_args(argv)
    if arguments.command == "render":
        from agent.bench.render import format_render_report, run_render_benchmark

        summary = run_render_benchmark(arguments.windows, arguments.spectra_dir, arguments.save_dir)
        print(format_render_report(summary))
    elif arguments.command == "loop":
        from agent.bench.loop import format_loop_report, run_loop_benchmark

        summary = run_loop_benchmark(
            arguments.episodes, arguments.model_ms, arguments.rule_based_spectra
        )
        print(format_loop_report(summary))
    elif arguments.command == "parse":
        from agent.bench.parse import format_parse_report, run_parse_benchmark

        print(format_parse_report(run_parse_benchmark(arguments.repeats)))
    elif arguments.command == "eval-concurrency":
        from agent.bench.eval_concurrency import (
            format_eval_concurrency_report,
            run_eval_concurrency,
        )

        summary = run_eval_concurrency(arguments.spectra, arguments.latency_ms, arguments.levels)
        print(format_eval_concurrency_report(summary))
    elif arguments.command == "bombs":
        from agent.bench.bombs import format_bomb_report, run_bomb_benchmark

        limit = int(arguments.limit_mib * 1024 * 1024)
        print(format_bomb_report(run_bomb_benchmark(limit, arguments.scale)))
    elif arguments.command == "kv-reuse":
        from agent.bench.kv_reuse import format_kv_reuse_report, run_kv_reuse_benchmark

        summary = run_kv_reuse_benchmark(
            arguments.spectra, arguments.turns, arguments.max_new_tokens
        )
        print(format_kv_reuse_report(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
