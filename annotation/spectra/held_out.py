"""Spectra held out from training (issue 33 item 6): the validation and test splits.

Training data that leaves the site (an SFT export, a preference export, a GRPO run's rows) must
share no spectrum with them, by object id or by content hash (the same arrays under another
name, or in another data set); ``held_out_overlap`` names what is shared, and the services
refuse with it (agent.splits holds the rule and the keys).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from agent.splits import HELD_OUT_SPLITS, SplitMembers, overlap
from annotation.spectra.models import Spectrum

HELD_OUT_NAME = "held-out spectra (splits " + ", ".join(HELD_OUT_SPLITS) + ")"


def _members(name: str, rows: Iterable[tuple[str, str]]) -> SplitMembers:
    ids: set[str] = set()
    hashes: set[str] = set()
    for object_id, content_hash in rows:
        if object_id:
            ids.add(object_id)
        if content_hash:
            hashes.add(content_hash)
    return SplitMembers(name, frozenset(ids), frozenset(hashes))


def held_out_members() -> SplitMembers:
    rows = Spectrum.objects.filter(split__in=HELD_OUT_SPLITS).values_list(
        "object_id", "content_hash"
    )
    return _members(HELD_OUT_NAME, rows)


def held_out_overlap(
    name: str, *, spectrum_ids: Iterable[int] = (), content_hashes: Iterable[str] = ()
) -> str | None:
    """A sentence naming what the spectra of ``name`` (by primary key or content hash) share
    with the held-out splits, or None when nothing is shared."""
    ids, hashes = set(spectrum_ids), set(content_hashes)
    if not ids and not hashes:
        return None
    rows = Spectrum.objects.filter(Q(pk__in=ids) | Q(content_hash__in=hashes)).values_list(
        "object_id", "content_hash"
    )
    return overlap(_members(name, rows), held_out_members())


def refusal(sentence: str) -> str:
    return (
        f"{sentence}: validation and evaluation spectra never go into training data; take them "
        "out (or move them to another split) first"
    )
