"""The neighbour benchmark (annotation.bench.similar) verifies recall before it times anything,
and stops when the index falls short."""

from __future__ import annotations

import numpy as np
import pytest

from agent import vector_index
from annotation.bench import similar


def test_it_prints_recall_before_the_query_times(capsys):
    assert similar.main(["--n", "2000", "--no-real"]) == 0
    out = capsys.readouterr().out
    assert out.index("recall@10 against exact search") < out.index("query time at n=2000")
    assert (
        "FAISS IndexFlatL2 (exact)" in out
        and "recall@10 against exact search, 200 held-out queries: 1.0000" in out
    )


def test_it_stops_before_timing_when_the_index_misses_neighbours(capsys, monkeypatch):
    def wrong(index, query, k):
        return np.arange(k, dtype=np.int64) + 10**9, np.zeros(k, np.float32)

    monkeypatch.setattr(vector_index, "search", wrong)
    assert similar.main(["--n", "2000", "--no-real"]) == 1
    out = capsys.readouterr().out
    assert "TOO LOW" in out and "query time" not in out


def test_it_refuses_a_tiny_n():
    with pytest.raises(SystemExit):
        similar.main(["--n", "10"])
