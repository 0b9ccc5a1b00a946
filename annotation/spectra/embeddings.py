"""Each spectrum's embedding for "find more like this" (agent.similarity), kept in step with the
spectra: written when spectra are stored (``spectra_store``) and when an expert's redshift
changes the rest frame (``spectrum_redshift_decide``); ``embeddings_sync`` writes the missing and
stale ones (another basis, another redshift), for spectra stored before this existed or after
the basis was refitted (``manage.py embeddings_sync``).

A spectrum that cannot be embedded (too little rest-frame coverage) gets a row with the reason
and no vector, so it is not retried at every sync and the page can say why.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery

from agent import similarity
from agent.spectra import SpectrumFormatError
from agent.spectra.npz import spectrum_from_npz_bytes
from annotation.spectra.models import RedshiftDecision, Spectrum, SpectrumEmbedding

SYNC_BATCH = 500


@cache
def current_basis() -> similarity.Basis:
    """The basis embeddings are written with, read once per process (``agent.similarity``)."""
    return similarity.load_basis()


def vector_of(row: SpectrumEmbedding) -> np.ndarray | None:
    if row.error or not row.vector:
        return None
    return np.frombuffer(bytes(row.vector), dtype=np.float32)


def rest_frame_z(spectrum: Spectrum) -> float:
    vetted = spectrum.redshift_decisions.order_by("-decided_at", "-id").first()
    return float(vetted.z) if vetted is not None else float(spectrum.redshift)


def embedding_values(spectrum: Spectrum, basis: similarity.Basis) -> dict[str, Any]:
    z = rest_frame_z(spectrum)
    try:
        value = spectrum_from_npz_bytes(bytes(spectrum.arrays))
        vector = similarity.embed(value, basis, redshift=z)
    except (similarity.EmbeddingError, SpectrumFormatError, ValueError) as error:
        return {"basis": basis.id, "redshift": z, "vector": b"", "error": str(error)[:200]}
    return {"basis": basis.id, "redshift": z, "vector": vector.tobytes(), "error": ""}


@transaction.atomic
def spectrum_embedding_refresh(*, spectrum: Spectrum) -> SpectrumEmbedding:
    """Write ``spectrum``'s embedding in its current rest frame with the current basis."""
    values = embedding_values(spectrum, current_basis())
    row, _ = SpectrumEmbedding.objects.update_or_create(spectrum=spectrum, defaults=values)
    return row


@transaction.atomic
def spectra_embed(*, spectra: Iterable[Spectrum]) -> int:
    """Embed each of ``spectra`` (just stored or changed); returns how many were written."""
    count = 0
    for spectrum in spectra:
        spectrum_embedding_refresh(spectrum=spectrum)
        count += 1
    return count


def stale_spectra() -> Q:
    """Spectra whose embedding is missing, of another basis, or of another rest frame."""
    latest_z = Subquery(
        RedshiftDecision.objects.filter(spectrum=OuterRef("spectrum"))
        .order_by("-decided_at", "-id")
        .values("z")[:1]
    )
    moved = (
        SpectrumEmbedding.objects.annotate(latest_z=latest_z)
        .filter(
            Q(latest_z__isnull=False) & ~Q(redshift=F("latest_z"))
            | Q(latest_z__isnull=True) & ~Q(redshift=F("spectrum__redshift"))
        )
        .values("spectrum_id")
    )
    other_basis = SpectrumEmbedding.objects.exclude(basis=current_basis().id).values("spectrum_id")
    return Q(embedding__isnull=True) | Q(pk__in=other_basis) | Q(pk__in=moved)


def embeddings_sync(*, limit: int | None = None) -> int:
    """Write the missing and stale embeddings, SYNC_BATCH per transaction; returns the count."""
    done = 0
    while limit is None or done < limit:
        batch = SYNC_BATCH if limit is None else min(SYNC_BATCH, limit - done)
        rows = list(Spectrum.objects.filter(stale_spectra()).order_by("pk")[:batch])
        if not rows:
            break
        done += spectra_embed(spectra=rows)
    return done
