"""``manage.py bench_candidates``: the benchmark lives in annotation.bench.candidates."""

from __future__ import annotations

from annotation.bench.candidates import Command

__all__ = ["Command"]
