from __future__ import annotations

from agent.bench.loop import format_loop_report, run_loop_benchmark


def test_it_reports_loop_overhead_as_a_share_of_a_model_step():
    summary = run_loop_benchmark(episodes=2, model_ms=200.0, rule_based_spectra=0)
    assert summary["steps_per_episode"] == 9
    assert summary["overhead"]["calls"] == 2
    median = summary["overhead"]["median_ms"]
    assert summary["overhead_share"] == median / (200.0 + median)
    assert "share of a step" in format_loop_report(summary)
