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
from collections.abc import Iterable
from dataclasses import dataclass
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
