"""The parser on megabyte-sized pathological turns, against one linear scan of the same text.

python -m agent.bench parse [--repeats 3]
"""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any

from agent.bench.workloads import time_call
from agent.parsing import parse_turn

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
        parse_seconds = [time_call(partial(parse_turn, text))[0] for _ in range(repeats)]
        scan_seconds = [time_call(partial(text.count, "<"))[0] for _ in range(repeats)]
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
