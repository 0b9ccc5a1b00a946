"""``manage.py bench_catalog``: the benchmark lives in annotation.bench.catalog."""

from __future__ import annotations

from annotation.bench.catalog import Command

__all__ = ["Command"]
