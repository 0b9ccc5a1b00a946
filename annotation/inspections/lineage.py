"""Which model produced a run's verdicts: a stable key and a label that names it.

- rule-based: ``rule-based@<code version>`` (the inspector is code; its version is the model).
- transformers: ``checkpoint:<sha256>`` of the checkpoint's weight files, so two folders holding
  the same weights are one model and a retrained folder under the same path is another.
- openai: ``endpoint:<registered name>/<model>``. An endpoint's URL is staff-only, so neither the
  key nor the label holds it: only the name it was registered under.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

KEY_MAX = 200
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
READ_BLOCK = 1 << 20

_digests: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}
_digests_lock = threading.Lock()


def _weight_files(folder: Path) -> list[Path]:
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and path.suffix in WEIGHT_SUFFIXES and "optimizer" not in path.name
    )


def weights_sha256(folder: str | Path) -> str:
    """SHA-256 over the checkpoint's weight files (relative name and bytes, in name order).

    Cached per process by each file's size and modification time: a run's candidates all ask.
    """
    root = Path(folder)
    files = _weight_files(root) if root.is_dir() else [root] if root.is_file() else []
    if not files:
        return ""
    stamp = tuple(
        (str(path.relative_to(root) if root.is_dir() else path.name), *_size_mtime(path))
        for path in files
    )
    cache_key = (str(root.resolve()), stamp)
    with _digests_lock:
        if cache_key in _digests:
            return _digests[cache_key]
    digest = hashlib.sha256()
    for (name, _, _), path in zip(stamp, files, strict=True):
        digest.update(name.encode() + b"\0")
        with path.open("rb") as handle:
            while block := handle.read(READ_BLOCK):
                digest.update(block)
    value = digest.hexdigest()
    with _digests_lock:
        _digests[cache_key] = value
    return value


def _size_mtime(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def model_identity(
    spec: dict[str, Any], info: dict[str, Any], *, code_version: str = ""
) -> tuple[str, str]:
    """(key, label) of the model a run with policy ``spec`` used; ``info`` is what the policy
    reported (``weights_sha256`` added by the job for a checkpoint)."""
    kind = str(spec.get("kind") or info.get("kind") or "?")
    if kind == "openai":
        name, model = str(spec.get("endpoint") or "?"), str(spec.get("model") or "?")
        key, label = f"endpoint:{name}/{model}", f"endpoint {name} · {model}"
    elif kind == "transformers":
        digest = str(info.get("weights_sha256") or "")
        folder = Path(str(spec.get("model_path") or "")).name or "?"
        key = f"checkpoint:{digest}" if digest else f"checkpoint-path:{spec.get('model_path')}"
        label = f"checkpoint {folder} · {digest[:12]}" if digest else f"checkpoint {folder}"
    else:
        version = str(info.get("code_version") or code_version or "unknown")
        name = str(info.get("name") or kind)
        key, label = f"{kind}@{version}", f"{name} {version}"
    return key[:KEY_MAX], label[:KEY_MAX]
