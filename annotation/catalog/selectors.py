"""Catalog reads: filters, sorting, capped pagination, columns and the vetting queue.

The catalog is one denormalized table (CatalogEntry) so that filtering and sorting a million
rows stays index-backed. Counting every match of a broad filter is the slow part of a paged
list, so pages count at most COUNT_CAP matches; beyond that PostgreSQL's planner estimate of
the total is shown, labelled as an estimate ("about 4,200,000 (estimate)"; "10,000+" where the
database gives none). Pagination covers the first COUNT_CAP rows (narrow the filters, flip the
sort, or export for more).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from django.core.cache import cache
from django.db import connection
from django.db.models import (
    Exists,
    F,
    OrderBy,
    OuterRef,
    Q,
    QuerySet,
)

from annotation.catalog import search
from annotation.catalog.columns import CATALOG_COLUMNS as CATALOG_COLUMNS  # re-exported: views
from annotation.catalog.columns import COLUMN_NAMES as COLUMN_NAMES
from annotation.catalog.columns import LIST_FIELDS, duplicates_count, vetted_redshift
from annotation.catalog.search import CatalogQueryError
from annotation.core.endpoints import public_policy_spec  # noqa: F401  (re-exported: views, reports)
from annotation.inspections.decision_history import answered_by, expert_tallies
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    EvidenceOutcome,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.inspections.selectors import current_models
from annotation.spectra.labels import LabelState
from annotation.spectra.models import Spectrum, Task

COUNT_CAP = 10_000
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# VOTable and FITS are written chunk by chunk to a temporary file (annotation.catalog_export),
# so this bounds disk and time, not memory: the LAMOST archive scale.
EXPORT_ROW_LIMIT = 25_000_000
SURVEY_CHOICES_SECONDS = 300

# Sort keys the list accepts, with the direction a first click on the column header asks for.
SORT_KEYS: dict[str, str] = {
    "object_id": "",
    "confidence": "-",
    "snr": "-",
    "created_at": "-",
    "ra": "",
    "dec": "",
}
DEFAULT_SORT = "-created_at"
NULLS_LAST_KEYS = frozenset({"snr", "ra", "dec"})

VERDICT_CHOICES = ("YES", "NO", "none")
EVIDENCE_CHOICES = tuple(EvidenceOutcome.values)  # the evidence ablation filter
EXPERT_SPLIT = "split"  # experts disagree (services.expert_decision_record)
EXPERT_DECISION_CHOICES = (*ExpertDecisionValue.values, EXPERT_SPLIT, "none")
LABEL_STATE_CHOICES = (*LabelState.ALL, "none")
# ?model= takes a model key, or "current": each task's promoted model (annotation.learning).
CURRENT_MODEL = "current"


# --- filters and sorting ----------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogFilters:
    task: str = ""
    verdict: str = ""  # YES | NO | none (no valid answer)
    survey: str = ""
    expert_decision: str = ""  # YES | NO | unsure | none (not vetted)
    confidence_min: float | None = None
    confidence_max: float | None = None
    snr_min: float | None = None
    object_id: str = ""  # object id or designation prefix (catalog.search.name_filter)
    run: int | None = None
    synthetic: bool | None = None
    shifted: bool | None = None  # the shift sentinel held the entry's run or subset
    evidence: str = ""  # the evidence ablation's outcome (EvidenceOutcome)
    label_state: str = ""  # pending | conflict | agreed | resolved | none (no decision yet)
    model: str = ""  # a model key, or "current" (each task's current model)
    dataset: str = ""  # the spectrum's data set, exact
    ra: float | None = None  # cone search (catalog.search): centre in degrees, radius in arcsec
    dec: float | None = None
    radius: float | None = None

    def as_query(self) -> dict[str, str]:
        """The GET parameters that give these filters back through filters_from_query."""
        query: dict[str, str] = {}
        for name, value in self.__dict__.items():
            if value is None or value == "":
                continue
            if isinstance(value, bool):
                query[name] = "yes" if value else "no"
            else:
                query[name] = str(value)
        return query


def _float_param(params: Mapping[str, str], name: str) -> float | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise CatalogQueryError(f"{name} must be a number; got {raw!r}") from None
    if not math.isfinite(value):
        raise CatalogQueryError(f"{name} must be a finite number; got {raw!r}")
    return value


def _choice_param(params: Mapping[str, str], name: str, choices: Iterable[str]) -> str:
    raw = (params.get(name) or "").strip()
    if not raw:
        return ""
    for choice in choices:
        if raw.lower() == choice.lower():
            return choice
    raise CatalogQueryError(f"{name} must be one of {', '.join(choices)}; got {raw!r}")


def _bool_param(params: Mapping[str, str], name: str) -> bool | None:
    raw = (params.get(name) or "").strip().lower()
    if not raw:
        return None
    if raw in {"yes", "true", "1"}:
        return True
    if raw in {"no", "false", "0"}:
        return False
    raise CatalogQueryError(f"{name} must be yes or no; got {raw!r}")


def _int_param(params: Mapping[str, str], name: str) -> int | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise CatalogQueryError(f"{name} must be a positive whole number; got {raw!r}")
    return int(raw)


def filters_from_query(params: Mapping[str, str]) -> CatalogFilters:
    """Read the list's GET parameters; raises CatalogQueryError naming a bad parameter."""
    filters = CatalogFilters(
        task=(params.get("task") or "").strip(),
        verdict=_choice_param(params, "verdict", VERDICT_CHOICES),
        survey=(params.get("survey") or "").strip(),
        expert_decision=_choice_param(params, "expert_decision", EXPERT_DECISION_CHOICES),
        confidence_min=_float_param(params, "confidence_min"),
        confidence_max=_float_param(params, "confidence_max"),
        snr_min=_float_param(params, "snr_min"),
        object_id=search.check_name(params.get("object_id") or ""),
        run=_int_param(params, "run"),
        synthetic=_bool_param(params, "synthetic"),
        shifted=_bool_param(params, "shifted"),
        evidence=_choice_param(params, "evidence", EVIDENCE_CHOICES),
        label_state=_choice_param(params, "label_state", LABEL_STATE_CHOICES),
        model=_model_param(params),
        dataset=(params.get("dataset") or "").strip(),
    )
    cone = search.cone_from_params(params)
    if cone is not None:
        filters = replace(filters, ra=cone.ra, dec=cone.dec, radius=cone.radius)
    check_filters(filters)
    return filters


MODEL_KEY_MAX = 200


def _model_param(params: Mapping[str, str]) -> str:
    value = (params.get("model") or "").strip()
    if len(value) > MODEL_KEY_MAX:
        raise CatalogQueryError(
            f"model must be a model key of at most {MODEL_KEY_MAX} characters; got {len(value)}"
        )
    return value


def limit_from_query(params: Mapping[str, str]) -> int | None:
    """An export's optional ?limit= (first N rows); raises CatalogQueryError."""
    limit = _int_param(params, "limit")
    if limit is not None and limit < 1:
        raise CatalogQueryError(f"limit must be at least 1; got {limit}")
    return limit


def check_filters(filters: CatalogFilters) -> None:
    low, high = filters.confidence_min, filters.confidence_max
    for name, value in (("confidence_min", low), ("confidence_max", high)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise CatalogQueryError(f"{name} must be between 0 and 1; got {value}")
    if low is not None and high is not None and low > high:
        raise CatalogQueryError(f"confidence_min ({low}) is above confidence_max ({high})")


def normalize_sort(sort: str | None, default: str = DEFAULT_SORT) -> str:
    """The sort to use: the requested one when allowed, else the default (never an error).

    "id" (insertion order) is accepted too: exports default to it because it streams from
    the primary key without sorting anything.
    """
    value = (sort or "").strip()
    key = value[1:] if value.startswith("-") else value
    return value if key in SORT_KEYS or key == "id" else default


def _ordering(sort: str) -> list[OrderBy]:
    key = sort[1:] if sort.startswith("-") else sort
    descending = sort.startswith("-")
    # Rows without a position or S/N go last either way, not first (PostgreSQL's default for
    # DESC). Confidence is set on every finished candidate, and keeping the database's
    # default null order there lets the (task, verdict, -confidence) indexes serve the sort.
    nulls_last = True if key in NULLS_LAST_KEYS else None
    ordering = [
        F(key).desc(nulls_last=nulls_last) if descending else F(key).asc(nulls_last=nulls_last)
    ]
    if key != "id":  # the id breaks ties, so that pages never overlap or skip rows
        ordering.append(F("id").desc() if descending else F("id").asc())
    return ordering


def _task_code(value: str) -> str:
    """The stored spelling of a task code typed in any case (codes are stored as defined)."""
    stored = Task.objects.filter(code__iexact=value).values_list("code", flat=True).first()
    return stored or value


def catalog_rows(filters: CatalogFilters, sort: str = DEFAULT_SORT) -> QuerySet[CatalogEntry]:
    rows = CatalogEntry.objects.all()
    if filters.task:
        rows = rows.filter(task_code=_task_code(filters.task))
    if filters.verdict:
        rows = rows.filter(verdict="" if filters.verdict == "none" else filters.verdict)
    if filters.survey:
        rows = rows.filter(survey=filters.survey)
    if filters.expert_decision:
        decision = "" if filters.expert_decision == "none" else filters.expert_decision
        rows = rows.filter(expert_decision=decision)
    if filters.confidence_min is not None:
        rows = rows.filter(confidence__gte=filters.confidence_min)
    if filters.confidence_max is not None:
        rows = rows.filter(confidence__lte=filters.confidence_max)
    if filters.snr_min is not None:
        rows = rows.filter(snr__gte=filters.snr_min)
    if filters.object_id:
        rows = rows.filter(search.name_filter(filters.object_id))
    if filters.dataset:
        rows = rows.filter(dataset=filters.dataset)
    if filters.ra is not None and filters.dec is not None:
        cone = search.Cone(filters.ra, filters.dec, filters.radius or search.DEFAULT_RADIUS_ARCSEC)
        rows = search.cone_filter(rows, cone)
    if filters.run is not None:
        rows = rows.filter(run_id=filters.run)
    if filters.synthetic is not None:
        rows = rows.filter(synthetic=filters.synthetic)
    if filters.shifted is not None:
        rows = rows.filter(shifted=filters.shifted)
    if filters.evidence:
        rows = rows.filter(evidence_outcome=filters.evidence)
    rows = rows.annotate(
        duplicates=duplicates_count(),
        vetted_z=vetted_redshift("z"),
        vetted_z_err=vetted_redshift("z_err"),
    )
    if filters.label_state:
        rows = rows.filter(label_state="" if filters.label_state == "none" else filters.label_state)
    if filters.model == CURRENT_MODEL:
        rows = rows.filter(_current_model_rows())
    elif filters.model:
        rows = rows.filter(model_key=filters.model)
    return rows.order_by(*_ordering(normalize_sort(sort)))


def _current_model_rows() -> Q:
    """Entries written by their task's current model (the latest promotion per task); a task
    with no promotion shows none."""
    current = current_models()
    if not current:
        return Q(pk__in=[])
    condition = Q()
    for task_code, model_key in current.items():
        condition |= Q(task_code=task_code, model_key=model_key)
    return condition


@dataclass(frozen=True)
class ModelChoice:
    key: str
    label: str


def model_choices(runs: QuerySet[InspectionRun]) -> list[ModelChoice]:
    """The models behind ``runs`` (those the user may read), newest first, one per key."""
    seen: dict[str, str] = {}
    for key, label in runs.exclude(model_key="").values_list("model_key", "model_label"):
        seen.setdefault(key, label or key)
    return [ModelChoice(key=key, label=label) for key, label in seen.items()]


def survey_choices() -> list[str]:
    """Distinct surveys in the catalog, cached briefly: a DISTINCT over 10^6 rows per page is
    too slow, and a survey new to the catalog showing up minutes later is harmless."""

    def distinct() -> list[str]:
        return sorted(CatalogEntry.objects.order_by().values_list("survey", flat=True).distinct())

    # get_or_set returns what `distinct` returned (a list) on a miss, never None here.
    return cast(list[str], cache.get_or_set("catalog:surveys", distinct, SURVEY_CHOICES_SECONDS))


# --- pages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogPage:
    entries: list[CatalogEntry]
    number: int
    page_size: int
    count: int  # matching rows, counted up to COUNT_CAP
    count_capped: bool  # more than COUNT_CAP rows match
    count_estimate: int | None = None  # the planner's estimate of all matches, when capped

    @property
    def num_pages(self) -> int:
        return max(1, math.ceil(self.count / self.page_size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.num_pages

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def start_index(self) -> int:
        return (self.number - 1) * self.page_size + 1 if self.entries else 0

    @property
    def end_index(self) -> int:
        return (self.number - 1) * self.page_size + len(self.entries)

    @property
    def count_label(self) -> str:
        if not self.count_capped:
            return f"{self.count:,}"
        # An estimate below what was counted is known to be wrong: the count is the better bound.
        if self.count_estimate is not None and self.count_estimate > self.count:
            return f"about {_rounded(self.count_estimate):,} (estimate)"
        return f"{self.count:,}+"


def _rounded(value: int) -> int:
    """An estimate to two significant figures: more digits would claim a precision it lacks."""
    digits = max(0, len(str(value)) - 2)
    return round(value, -digits)


def estimated_count(rows: QuerySet[Any]) -> int | None:
    """PostgreSQL's planner estimate of how many rows ``rows`` matches (EXPLAIN, nothing run).

    Exact counts of broad filters over tens of millions of rows take seconds; the estimate
    comes from the table statistics in about a millisecond. None on other databases.
    """
    if connection.vendor != "postgresql":
        return None
    sql, params = rows.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


@dataclass(frozen=True)
class CatalogRowView:
    """One list row with its numbers already formatted: the page shows 50 of these, and
    Django's floatformat (Decimal arithmetic) cost more than the query behind them."""

    detail_url: str
    run_url: str
    object_id: str
    synthetic: bool
    shifted: bool
    survey: str
    ra: str
    dec: str
    task_code: str
    verdict: str
    confidence: str
    snr: str
    policy_name: str
    expert_decision: str
    run_id: int
    model_key: str
    model_label: str
    vetted_label: str
    label_state: str
    created: str
    expert_tally: str = ""  # "YES 1 · NO 1" when the experts disagree
    designation: str = ""
    dataset: str = ""
    spectrum_url: str = ""
    spectrum_id: int | None = None
    duplicates: int = 0
    duplicate_of: str = ""  # "also in lamost (spectrum 12), uploads (spectrum 40)"
    expert_quality: str = ""  # the experts' mean 0-4 quality, "" when none gave one
    expert_issues: str = ""  # "sky, low_snr"
    content_hash: str = ""
    evidence: str = ""  # the evidence ablation's outcome; "" when not tested


def _duplicate_notes(entries: list[CatalogEntry]) -> dict[str, list[tuple[int, str]]]:
    """The stored spectra of each duplicated content on the page: one query per page."""
    hashes = {e.content_hash for e in entries if getattr(e, "duplicates", 0) and e.content_hash}
    found: dict[str, list[tuple[int, str]]] = {}
    if hashes:
        rows = Spectrum.objects.filter(content_hash__in=hashes).order_by("pk")
        for pk, content_hash, dataset in rows.values_list("pk", "content_hash", "dataset"):
            found.setdefault(content_hash, []).append((pk, dataset))
    return found


def _also_in(entry: CatalogEntry, notes: dict[str, list[tuple[int, str]]]) -> str:
    others = [(pk, ds) for pk, ds in notes.get(entry.content_hash, []) if pk != entry.spectrum_id]
    return ", ".join(f"{dataset} (spectrum {pk})" for pk, dataset in others[:10])


def _fixed(value: float | None, decimals: int) -> str:
    return "" if value is None else f"{value:.{decimals}f}"


def list_rows(
    entries: Iterable[CatalogEntry],
    *,
    detail_prefix: str,
    list_url: str,
    spectrum_prefix: str = "/spectra/",
) -> list[CatalogRowView]:
    """Rows for the list page; ``detail_prefix`` is the detail URL without the id."""
    from django.utils import timezone

    entries = list(entries)
    split = [
        e.candidate_id
        for e in entries
        if e.expert_decision == EXPERT_SPLIT and e.candidate_id is not None
    ]
    tallies = expert_tallies(split)
    notes = _duplicate_notes(entries)
    return [
        CatalogRowView(
            detail_url=f"{detail_prefix}{entry.pk}/",
            run_url=f"{list_url}?run={entry.run_id}",
            object_id=entry.object_id,
            synthetic=entry.synthetic,
            shifted=entry.shifted,
            survey=entry.survey,
            ra=_fixed(entry.ra, 5),
            dec=_fixed(entry.dec, 5),
            task_code=entry.task_code,
            verdict=entry.verdict,
            confidence=_fixed(entry.confidence, 3),
            snr=_fixed(entry.snr, 1),
            policy_name=entry.policy_name,
            expert_decision=entry.expert_decision,
            run_id=entry.run_id,
            model_key=entry.model_key,
            model_label=entry.model_label,
            vetted_label=entry.vetted_label,
            label_state=entry.label_state,
            created=timezone.localtime(entry.created_at).strftime("%Y-%m-%d %H:%M")
            if entry.created_at
            else "",
            expert_tally=tallies.get(entry.candidate_id, "")
            if entry.candidate_id is not None
            else "",
            designation=entry.designation,
            dataset=entry.dataset,
            spectrum_id=entry.spectrum_id,
            spectrum_url=f"{spectrum_prefix}{entry.spectrum_id}/" if entry.spectrum_id else "",
            duplicates=int(getattr(entry, "duplicates", 0) or 0),
            duplicate_of=_also_in(entry, notes),
            expert_quality=_fixed(entry.expert_quality, 1),
            expert_issues=entry.expert_issues.replace(",", ", "),
            content_hash=entry.content_hash,
            evidence=entry.evidence_outcome,
        )
        for entry in entries
    ]


def page_number(raw: str | int | None) -> int:
    """A requested page number; anything unreadable is page 1 (like Paginator.get_page)."""
    try:
        return max(1, int(raw or 1))
    except (TypeError, ValueError):
        return 1


def catalog_page(
    rows: QuerySet[CatalogEntry], page: int = 1, page_size: int = PAGE_SIZE
) -> CatalogPage:
    """One page of rows, counting at most COUNT_CAP matches (a LIMITed count, not a full one).

    A page past the last one shows the last one; pages reach the first COUNT_CAP rows.
    """
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise CatalogQueryError(f"page_size must be 1-{MAX_PAGE_SIZE}; got {page_size}")
    counted = rows.order_by()[: COUNT_CAP + 1].count()
    capped = counted > COUNT_CAP
    count = min(counted, COUNT_CAP)
    last = max(1, math.ceil(count / page_size))
    number = min(max(1, page), last)
    offset = (number - 1) * page_size
    limit = min(page_size, max(0, count - offset))
    entries = list(rows.only(*LIST_FIELDS)[offset : offset + limit]) if limit else []
    return CatalogPage(
        entries=entries,
        number=number,
        page_size=page_size,
        count=count,
        count_capped=capped,
        count_estimate=estimated_count(rows) if capped else None,
    )


# --- vetting ----------------------------------------------------------------------------------


def vetting_queue(user: Any, *, also: QuerySet[Any] | None = None) -> QuerySet[Candidate]:
    """Finished candidates that wait for this user's decision: those routed to an expert, and
    those whose first two experts disagree (a conflict: this user has not decided, so is
    neither of them), and ``also`` (candidate ids: the open audit samples'). Conflicts come
    first, then the oldest; a candidate whose spectrum has its label for the task, or this
    user's answer (on any run's candidate), is done."""
    conflicts = CatalogEntry.objects.filter(label_state=LabelState.CONFLICT)
    in_conflict = Exists(conflicts.filter(candidate=OuterRef("pk")))
    # The sets by their indexes, one UNION, not `needs_expert OR EXISTS (conflict)`: that OR
    # is a filter on every candidate of every run (10^6 rows read for a queue of 70,000).
    waiting = (
        Candidate.objects.filter(needs_expert=True)
        .order_by()
        .values("pk")
        .union(conflicts.order_by().values("candidate_id"))
    )
    if also is not None:
        waiting = waiting.union(also)
    labelled = CatalogEntry.objects.filter(
        candidate=OuterRef("pk"), label_state__in=LabelState.LABELLED
    )
    return (
        Candidate.objects.annotate(in_conflict=in_conflict)
        .filter(pk__in=waiting, state=CandidateState.DONE)
        .exclude(answered_by(user))
        .exclude(Exists(labelled))  # an anti-join: a LEFT JOIN read every catalog entry
        .select_related("run__task", "spectrum")
        .order_by(F("in_conflict").desc(), "finished_at", "id")
    )


@dataclass(frozen=True)
class ListNeighbours:
    """Where an entry sits in the filtered, sorted list it was opened from."""

    previous_id: int | None
    next_id: int | None
    position: int | None  # 1-based; None when the entry is not among the first COUNT_CAP rows
    count: int
    capped: bool


def list_neighbours(rows: QuerySet[CatalogEntry], entry_id: int) -> ListNeighbours:
    """The previous and next entries of ``entry_id`` in ``rows`` (the list's own filters and
    sort), reading at most COUNT_CAP ids, the rows the list's pages reach."""
    ids = list(rows.values_list("id", flat=True)[: COUNT_CAP + 1])
    capped = len(ids) > COUNT_CAP
    ids = ids[:COUNT_CAP]
    if entry_id not in ids:
        return ListNeighbours(None, None, None, len(ids), capped)
    at = ids.index(entry_id)
    return ListNeighbours(
        previous_id=ids[at - 1] if at > 0 else None,
        next_id=ids[at + 1] if at + 1 < len(ids) else None,
        position=at + 1,
        count=len(ids),
        capped=capped,
    )
