"""JSON parsing of untrusted text with a nesting limit.

Python's ``json`` recurses once per nested array or object, so ``[`` × 100,000 raises
``RecursionError`` deep in the parser (a 500 in a web request, a crash in a worker). Every JSON
that comes from outside (request bodies, imported files, model output) goes through ``loads``
here: the nesting is measured first, in C-speed passes with no recursion, and text nested deeper
than the limit is refused with ``JsonTooDeepError`` (a ``ValueError``) naming the limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

MAX_JSON_DEPTH = 64
"""Nested arrays and objects a JSON document may hold; specvet's own documents need under 10."""

# A JSON string, escapes included (unrolled so that a long string is one cheap regex step).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_CHUNK = 1 << 20


class JsonTooDeepError(ValueError):
    """JSON nested deeper than the limit; nothing of it was parsed."""


def nesting_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do
    not count). Exact for valid JSON and for the valid prefix of invalid JSON, which is all a
    parser reads before it fails."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    return _max_running_depth(_STRING.sub(b"", text).translate(None, _NOT_BRACKETS))


def _max_running_depth(brackets: bytes) -> int:
    deepest, depth = 0, 0
    for start in range(0, len(brackets), _CHUNK):
        codes = np.frombuffer(
            brackets, dtype=np.uint8, count=min(_CHUNK, len(brackets) - start), offset=start
        )
        steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
        running = np.cumsum(steps) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


def check_depth(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, what: str = "JSON") -> None:
    """Raise JsonTooDeepError when ``text`` nests deeper than ``max_depth``."""
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonTooDeepError(
            f"{what} nests arrays and objects {depth} levels deep; the limit is {max_depth}"
        )


def loads(
    text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, what: str = "JSON", **kwargs: Any
) -> Any:
    """``json.loads`` that refuses text nested deeper than ``max_depth`` (JsonTooDeepError)."""
    check_depth(text, max_depth=max_depth, what=what)
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        # Only reachable with a max_depth near the interpreter's recursion limit.
        raise JsonTooDeepError(f"{what} nests too deeply for this parser") from None
