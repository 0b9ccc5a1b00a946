"""Fixtures shared by the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.policies.tiny_qwen import build_tiny_qwen25vl
from agent.real_corpus import CorpusEntry, CorpusUnavailable, fetch, load_manifest


@pytest.fixture(scope="session")
def tiny_qwen_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2.5-VL checkpoint, built once per test session."""
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny_qwen25vl"))


@pytest.fixture(scope="session")
def real() -> dict[str, CorpusEntry]:
    """Every real-corpus entry by id, the cache fetched first; skips where it cannot be built."""
    try:
        fetch(quiet=True)
    except CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache cannot be built here: {exc}")
    return {entry.id: entry for entry in load_manifest()}
