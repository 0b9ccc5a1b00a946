"""Gold masking: the read rule that keeps a waiting gold item unrecognisable, on every read path.

A gold item is a candidate whose answer is known (its spectrum's vetted label), mixed into a
vetter's queue (annotation.learning.queue). Until the vetter answers it, or decides on its
spectrum, whatever tells its answer must not reach them: in the catalog a labelled spectrum in
the queue can only be gold, and its label is the answer. So for the (spectrum, task) of each gold
item waiting for a user, and for any spectrum with the same content (same SHA-256, another data
set), that user reads:

- catalog entries with what vetting said blanked (MASKED_FIELDS), in the database itself: the
  masked values replace the stored ones in every row, value, filter, sort, count and aggregate
  of the query (``mask_entries``; ``annotation.blinding.catalog_entries_visible_to`` applies it,
  so lists, pages, exports, reports, comparisons, figures and duplicate groups all obey it);
  a query already filtered on one of those fields before the mask leaves such entries out;
- no expert decision on a candidate of that spectrum for the task (``hidden_decisions``);
- no vetted label of that spectrum for the task (``label_hidden``).

Once the vetter answers the item, or decides on its spectrum, all shows again. Nothing stored
changes: the mask is in the read only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from django.db.models import (
    Case,
    CharField,
    F,
    Field,
    FloatField,
    Q,
    QuerySet,
    Value,
    When,
)

from annotation.core import permissions
from annotation.inspections.models import CatalogEntry
from annotation.learning.queue import gold_candidates
from annotation.spectra.models import Spectrum

# What vetting said about an entry, and what each reads as while masked.
MASKED_FIELDS: dict[str, Any] = {
    "expert_decision": "",
    "vetted_label": "",
    "label_state": "",
    "expert_quality": None,
    "expert_issues": "",
}


def _field(name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", CatalogEntry._meta.get_field(name))


_COLUMNS = frozenset(_field(name).column for name in MASKED_FIELDS)


@dataclass(frozen=True)
class GoldMask:
    """The (spectrum id, task code) and (content hash, task code) of the gold items waiting for
    one user; empty for everyone else."""

    spectra: frozenset[tuple[int, str]] = frozenset()
    contents: frozenset[tuple[str, str]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.spectra or self.contents)

    def _q(self, *, spectrum: str, content_hash: str, task: str) -> Q | None:
        by_task: dict[str, tuple[set[int], set[str]]] = {}
        for spectrum_id, code in self.spectra:
            by_task.setdefault(code, (set(), set()))[0].add(spectrum_id)
        for digest, code in self.contents:
            by_task.setdefault(code, (set(), set()))[1].add(digest)
        hidden = Q()
        for code, (ids, hashes) in sorted(by_task.items()):
            same = Q(**{f"{spectrum}__in": sorted(ids)}) if ids else Q()
            if hashes:
                same |= Q(**{f"{content_hash}__in": sorted(hashes)})
            hidden |= Q(**{task: code}) & same
        return hidden or None

    def entries(self) -> Q | None:
        """The catalog entries masked (None: none)."""
        return self._q(spectrum="spectrum_id", content_hash="content_hash", task="task_code")

    def candidates(self, prefix: str = "") -> Q | None:
        """The candidates (through ``prefix``, e.g. "candidate__") whose decisions are hidden."""
        return self._q(
            spectrum=f"{prefix}spectrum_id",
            content_hash=f"{prefix}spectrum__content_hash",
            task=f"{prefix}run__task__code",
        )

    def hides(self, *, spectrum_id: int | None, task_code: str, content_hash: str = "") -> bool:
        return (spectrum_id is not None and (spectrum_id, task_code) in self.spectra) or (
            bool(content_hash) and (content_hash, task_code) in self.contents
        )

    def hides_any(self, keys: list[list[Any]] | None) -> bool:
        """Whether figures computed over the labels of these [spectrum id, task code] include a
        masked one (None: not recorded, so any may be included)."""
        if not self:
            return False
        if keys is None:
            return True
        hashes = dict(
            Spectrum.objects.filter(pk__in=[key[0] for key in keys]).values_list(
                "pk", "content_hash"
            )
        )
        return any(
            self.hides(
                spectrum_id=spectrum_id, task_code=task, content_hash=hashes.get(spectrum_id, "")
            )
            for spectrum_id, task in keys
        )


def gold_mask_for(user: Any) -> GoldMask:
    """What is masked for ``user``: the gold items waiting for them, if they vet."""
    if user is None or not user.is_authenticated or not permissions.VET.allows(user):
        return GoldMask()
    rows = gold_candidates(user).values_list(
        "spectrum_id", "run__task__code", "spectrum__content_hash"
    )
    spectra, contents = set(), set()
    for spectrum_id, code, content_hash in rows:
        spectra.add((spectrum_id, code))
        if content_hash:
            contents.add((content_hash, code))
    return GoldMask(spectra=frozenset(spectra), contents=frozenset(contents))


def withholds_evaluation(mask: GoldMask, result: Any) -> bool:
    """Whether an evaluation job's result (annotation.inspections.evaluations) scored a policy
    on the label of a masked spectrum: its vetted part, which counts the label, is withheld."""
    result = result if isinstance(result, dict) else {}
    if "vetted" not in (result.get("parts") or []):
        return False
    return mask.hides_any(result.get("vetted_spectra"))


# --- catalog entries ------------------------------------------------------------------------


def _masked_value(name: str, hidden: Q) -> Case:
    output: Field[Any, Any] = FloatField() if name == "expert_quality" else CharField()
    blank = MASKED_FIELDS[name]
    return Case(
        When(hidden, then=Value(blank, output_field=output)),
        default=F(_field(name).attname),
        output_field=output,
    )


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", ()) or ():
        yield from _nodes(child)
    for side in ("lhs", "rhs"):
        inner = getattr(node, side, None)
        if inner is not None and not isinstance(inner, str | int | float | list | tuple):
            yield from _nodes(inner)
    sources = getattr(node, "get_source_expressions", None)
    if callable(sources):
        for inner in sources():
            if inner is not None:
                yield from _nodes(inner)


def selects_on_vetting(rows: QuerySet[CatalogEntry]) -> bool:
    """Whether ``rows`` is already filtered on one of the masked fields' stored values."""
    for node in _nodes(rows.query.where):
        target = getattr(node, "target", None)
        if getattr(target, "model", None) is CatalogEntry and target.column in _COLUMNS:  # type: ignore[union-attr]
            return True
    return False


class MaskedEntries(QuerySet[CatalogEntry]):
    """Catalog entries whose masked fields are annotations (``mask_entries``). An aggregate
    named like one of them would replace it before it is read: it is computed under another
    name and handed back under its own."""

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        names = {f"gold_masked_{name}" if name in MASKED_FIELDS else name: name for name in kwargs}
        renamed = {alias: kwargs[name] for alias, name in names.items()}
        result = super().aggregate(*args, **renamed)
        return {names.get(alias, alias): value for alias, value in result.items()}


def mask_entries(rows: QuerySet[CatalogEntry], mask: GoldMask) -> QuerySet[CatalogEntry]:
    """``rows`` with the masked fields of the gold entries blanked in the query itself.

    Each masked field is replaced by an annotation of the same name (the stored value, or the
    blank for a masked entry), which Django resolves before the column everywhere the query
    names the field afterwards: the values of model instances and of ``values()`` and
    ``values_list()``, filters, sorts and aggregates. A filter on one of them made before the
    mask (the caller's ``rows``) saw the stored values: such entries are left out instead.
    """
    hidden = mask.entries()
    if hidden is None:
        return rows
    if selects_on_vetting(rows):
        rows = rows.exclude(hidden)
    masked = rows.all()
    masked.__class__ = MaskedEntries
    for name in MASKED_FIELDS:
        # Query.add_annotation, not QuerySet.annotate: the latter refuses a field's name, and
        # the name is the point (every later reference resolves to the masked value).
        masked.query.add_annotation(_masked_value(name, hidden), alias=name, select=True)
    return masked
