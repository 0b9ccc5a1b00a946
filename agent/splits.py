"""Splits that cannot leak: which spectra a set holds, and a refusal when two sets share one.

A spectrum is known by its object id and by the hash of its content. ``content_hash`` is the
site's ``Spectrum.content_hash`` (SHA-256 of the wavelength and flux arrays as float64), so the
same arrays under another name are caught; ``Spectrum.digest`` (what a rollout records as
``meta["spectrum_sha256"]``) is kept beside it, so a trajectory, which holds no arrays, is
matched through the digest its rollout recorded. Training data (SFT trajectories, GRPO rows),
in-training validation and evaluation must be pairwise disjoint on both keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Splits held out from training: in-training validation and evaluation draw from these.
VALIDATION_SPLIT = "validation"
EVALUATION_SPLIT = "test"
HELD_OUT_SPLITS = (VALIDATION_SPLIT, EVALUATION_SPLIT)
SHOWN = 5  # overlapping ids and hashes named in a refusal


def content_hash(spectrum: Any) -> str:
    """SHA-256 of the wavelength and flux arrays as float64 (the site's content hash)."""
    digest = hashlib.sha256()
    for array in (spectrum.wavelength, spectrum.flux):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return digest.hexdigest()


class SplitOverlap(ValueError):
    """Two sets that must be disjoint share spectra; the message names the sets and them."""


@dataclass(frozen=True)
class SplitMembers:
    """The spectra of one named set, by object id and by content hash."""

    name: str
    object_ids: frozenset[str]
    content_hashes: frozenset[str]

    @classmethod
    def of_spectra(cls, name: str, spectra: Iterable[Any]) -> SplitMembers:
        """From ``agent.spectra.Spectrum`` values: object ids, content hashes and digests."""
        ids: set[str] = set()
        hashes: set[str] = set()
        for spectrum in spectra:
            if spectrum.object_id:
                ids.add(spectrum.object_id)
            hashes.add(content_hash(spectrum))
            hashes.add(spectrum.digest())
        return cls(name, frozenset(ids), frozenset(hashes))

    @classmethod
    def of_trajectories(cls, name: str, trajectories: Iterable[Any]) -> SplitMembers:
        """From trajectories: their spectrum's object id, and the content hash or digest their
        rollout recorded (``meta["spectrum_content_hash"]``, ``meta["spectrum_sha256"]``)."""
        ids: set[str] = set()
        hashes: set[str] = set()
        for trajectory in trajectories:
            if trajectory.spectrum.object_id:
                ids.add(trajectory.spectrum.object_id)
            for key in ("spectrum_content_hash", "spectrum_sha256"):
                value = trajectory.meta.get(key)
                if isinstance(value, str) and value:
                    hashes.add(value)
        return cls(name, frozenset(ids), frozenset(hashes))

    def __or__(self, other: SplitMembers) -> SplitMembers:
        return SplitMembers(
            f"{self.name} and {other.name}",
            self.object_ids | other.object_ids,
            self.content_hashes | other.content_hashes,
        )


def _named(values: set[str]) -> str:
    shown = ", ".join(sorted(values)[:SHOWN])
    return shown + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def overlap(a: SplitMembers, b: SplitMembers) -> str | None:
    """A sentence naming what ``a`` and ``b`` share, or None when they are disjoint."""
    ids = set(a.object_ids & b.object_ids)
    hashes = set(a.content_hashes & b.content_hashes)
    if not ids and not hashes:
        return None
    parts = []
    if ids:
        parts.append(f"{len(ids)} object id(s) {_named(ids)}")
    if hashes:
        parts.append(f"{len(hashes)} content hash(es) {_named({h[:16] for h in hashes})}")
    return f"{a.name} and {b.name} share " + "; ".join(parts)


def check_disjoint(*sets: SplitMembers) -> None:
    """Raise ``SplitOverlap`` naming every pair of ``sets`` that shares a spectrum."""
    found = [
        sentence
        for index, a in enumerate(sets)
        for b in sets[index + 1 :]
        if (sentence := overlap(a, b)) is not None
    ]
    if found:
        raise SplitOverlap(
            "; ".join(found) + ": training, validation and evaluation must not share spectra"
        )


# --- a checkpoint's training spectra --------------------------------------------------------------

# Beside a checkpoint's weights: the spectra it (and every checkpoint it was trained from) trained
# on, so an evaluation of it can be refused when it would score spectra the model has seen.
TRAINING_SPECTRA_FILE = "specvet_training_spectra.json"
TRAINING_SPECTRA_SCHEMA = 1


class TrainingSpectraError(ValueError):
    """A training-spectra file that cannot be read or does not follow the schema."""


def save_training_spectra(directory: str | Path, members: SplitMembers) -> Path:
    """Write ``members`` (the spectra a checkpoint trained on) beside its weights."""
    path = Path(directory) / TRAINING_SPECTRA_FILE
    payload = {
        "schema": TRAINING_SPECTRA_SCHEMA,
        "name": members.name,
        "object_ids": sorted(members.object_ids),
        "content_hashes": sorted(members.content_hashes),
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return path


def load_training_spectra(model_path: str | Path) -> SplitMembers | None:
    """The spectra the checkpoint at ``model_path`` trained on, or None when it records none (a
    base model, a hub name, a checkpoint written before the file existed)."""
    path = Path(model_path) / TRAINING_SPECTRA_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise TrainingSpectraError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or data.get("schema") != TRAINING_SPECTRA_SCHEMA:
        raise TrainingSpectraError(f"{path} does not follow schema {TRAINING_SPECTRA_SCHEMA}")
    ids, hashes = data.get("object_ids"), data.get("content_hashes")
    if not isinstance(ids, list) or not isinstance(hashes, list):
        raise TrainingSpectraError(f"{path} lacks object_ids or content_hashes lists")
    name = f"the training spectra of checkpoint {Path(model_path).name}"
    return SplitMembers(name, frozenset(map(str, ids)), frozenset(map(str, hashes)))


def with_base_spectra(members: SplitMembers, base_model: str | Path) -> SplitMembers:
    """``members`` and the spectra ``base_model`` was trained on (SFT -> GRPO chains), kept
    under ``members``' name."""
    base = load_training_spectra(base_model) if Path(base_model).is_dir() else None
    if base is None:
        return members
    return SplitMembers(
        members.name,
        members.object_ids | base.object_ids,
        members.content_hashes | base.content_hashes,
    )


def policy_checkpoint(spec: dict[str, Any]) -> str | None:
    """The local checkpoint directory a policy spec loads (transformers, vllm), or None."""
    if not isinstance(spec, dict):
        return None
    path = spec.get("model_path")
    if spec.get("kind") in ("transformers", "vllm") and isinstance(path, str) and path:
        return path if Path(path).is_dir() else None
    return None


def check_evaluation_disjoint(spec: dict[str, Any], evaluation: SplitMembers) -> None:
    """Raise ``SplitOverlap`` when ``evaluation`` shares a spectrum with what the checkpoint
    ``spec`` loads trained on (nothing to check for a policy that records no training spectra)."""
    path = policy_checkpoint(spec)
    trained = load_training_spectra(path) if path is not None else None
    if trained is not None:
        check_disjoint(trained, evaluation)
