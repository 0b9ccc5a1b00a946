"""Vetting-queue reads beside the queue's order (``selectors.vetting_queue``): who a candidate
waits for after staff reassign or close it, the staff's filtered view of the queue, and the
quality flag's choices for the queue page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.urls import reverse

from annotation import blinding
from annotation.catalog import selectors
from annotation.catalog.selectors import (
    MODEL_KEY_MAX,
    VERDICT_CHOICES,
    CatalogQueryError,
    _choice_param,
    _float_param,
)
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.inspections.decision_history import one_per_spectrum_task
from annotation.inspections.models import Candidate, CandidateState
from annotation.inspections.quality import COMMENT_MAX_CHARS, ISSUE_FLAGS, QUALITY_SCALE
from annotation.learning import queue as active_queue
from annotation.spectra.models import Task

QUEUE_PAGE_SIZE = 100
# waiting: in some expert's queue; closed: taken out by staff; unrouted: finished, never sent
# to experts (requeue sends it); any: every finished candidate.
QUEUE_STATUSES = ("waiting", "closed", "unrouted", "any")


def quality_context() -> dict[str, Any]:
    return {
        "quality_scale": QUALITY_SCALE,
        "issue_flags": ISSUE_FLAGS,
        "comment_max": COMMENT_MAX_CHARS,
    }


def queue_for_user(
    queue: QuerySet[Candidate], user: Any, *, audit: QuerySet[Any] | None = None
) -> QuerySet[Candidate]:
    """``queue`` less what staff took out of it: closed candidates and those assigned to
    another expert (an assigned candidate waits for its expert alone); the ``audit`` ones
    (candidate ids: the open audit samples') wait for every expert whatever staff did."""
    kept = Q(queue_closed_reason="") & (Q(assigned_to__isnull=True) | Q(assigned_to=user))
    return queue.filter(kept | Q(pk__in=audit) if audit is not None else kept)


def _vetter_queue_unblinded(user: Any) -> QuerySet[Candidate]:
    """The catalog's queue less what staff took out or gave another expert, with the open
    audit samples' candidates: what would wait for ``user`` but for the blinding rule. The
    samples' few ids join the queue's UNION of ids and spare it staff's filter: the queue and
    the sample as two id subqueries OR'ed (`id IN (a) OR id IN (b)`) are a subplan per row
    that PostgreSQL scans linearly once the queue outgrows work_mem (minutes at 10^6), and as
    one UNION of the two the whole queue was built first (2.8 s at 10^6)."""
    audit = active_queue.open_audit_ids()
    rows = queue_for_user(selectors.vetting_queue(user, also=audit), user, audit=audit)
    return rows.select_related("run__task", "spectrum").order_by("finished_at", "id")


def vetter_queue_rows(user: Any) -> QuerySet[Candidate]:
    """What waits for ``user`` (``vetter_queue``) before one candidate per spectrum and task is
    chosen: what ``learning.queue.next_candidate`` and ``waiting_count`` read, each choosing
    the first of each spectrum and task their own faster way (the same candidates)."""
    return blinding.candidates_visible_to(user=user, rows=_vetter_queue_unblinded(user))


def vetter_queue(user: Any) -> QuerySet[Candidate]:
    """What waits for ``user`` on ``/vetting/`` (and is counted on the home page and by the
    API): the catalog's queue less what staff took out or gave another expert, with the open
    audit samples' candidates, less what the blinding rule hides from them; then one candidate
    per spectrum and task, however many runs inspected it (a label is about a spectrum and a
    task: the expert answers it once)."""
    return one_per_spectrum_task(vetter_queue_rows(user))


def vetter_queue_hidden(user: Any) -> blinding.HiddenCandidates:
    """What the blinding rule keeps out of ``user``'s vetting queue, and which of the open
    campaigns they rate keeps it out (shown wherever the queue is, so a short or empty queue
    says why)."""
    blinded = blinding.blinding_for(user)
    if blinded.confined or blinded.hidden_candidates() is None:
        # nothing is hidden from them: skip building the queue twice (seconds under load)
        return blinding.HiddenCandidates()
    # counted as the queue counts: spectra and tasks that no readable candidate serves
    unblinded = _vetter_queue_unblinded(user)
    visible = vetter_queue(user)
    served = Q()
    for task_id in Task.objects.values_list("pk", flat=True):
        task_served = visible.filter(run__task_id=task_id).order_by().values("spectrum_id")
        served |= Q(run__task_id=task_id, spectrum_id__in=task_served)
    left_out = one_per_spectrum_task(unblinded.exclude(served))
    return blinding.candidates_hidden_from(user=user, rows=left_out)


def hidden_summary(hidden: blinding.HiddenCandidates) -> dict[str, Any]:
    """``hidden`` as the pages and APIs show it: the count and each campaign with its link."""
    return {
        "count": hidden.count,
        "campaigns": [
            {
                "id": row.campaign_id,
                "name": row.name,
                "count": row.count,
                "url": reverse("rating_campaign", args=[row.campaign_id]),
            }
            for row in hidden.campaigns
        ],
    }


@dataclass(frozen=True)
class QueueFilters:
    status: str = "waiting"
    task: str = ""
    dataset: str = ""
    verdict: str = ""  # YES | NO | none (no answer)
    model: str = ""  # a run's model key
    snr_min: float | None = None
    snr_max: float | None = None
    assigned: str = ""  # a username, or "none"


def queue_filters_from_query(params: Mapping[str, str]) -> QueueFilters:
    """Read the staff queue page's GET parameters; raises CatalogQueryError naming a bad one."""
    model = (params.get("model") or "").strip()
    if len(model) > MODEL_KEY_MAX:
        raise CatalogQueryError(f"model must be at most {MODEL_KEY_MAX} characters")
    filters = QueueFilters(
        status=_choice_param(params, "status", QUEUE_STATUSES) or "waiting",
        task=(params.get("task") or "").strip()[:16],
        dataset=(params.get("dataset") or "").strip()[:80],
        verdict=_choice_param(params, "verdict", VERDICT_CHOICES),
        model=model,
        snr_min=_float_param(params, "snr_min"),
        snr_max=_float_param(params, "snr_max"),
        assigned=(params.get("assigned") or "").strip()[:150],
    )
    if (
        filters.snr_min is not None
        and filters.snr_max is not None
        and filters.snr_min > filters.snr_max
    ):
        raise CatalogQueryError(f"snr_min ({filters.snr_min}) is above snr_max ({filters.snr_max})")
    return filters


# the metadata an expert filters their own queue by (the staff's page reads every field)
EXPERT_FILTER_PARAMS = ("task", "dataset", "snr_min", "snr_max")


def expert_filters_from_query(params: Mapping[str, str]) -> QueueFilters:
    """The expert's queue filters (task, data set, S/N range) from ``params``; raises
    CatalogQueryError naming a bad one."""
    return queue_filters_from_query({name: params.get(name) or "" for name in EXPERT_FILTER_PARAMS})


def metadata_rows(rows: QuerySet[Candidate], filters: QueueFilters) -> QuerySet[Candidate]:
    """``rows`` narrowed by the filters' task, data set and S/N range (their order kept)."""
    if filters.task:
        rows = rows.filter(run__task__code__iexact=filters.task)
    if filters.dataset:
        rows = rows.filter(spectrum__dataset=filters.dataset)
    if filters.snr_min is not None:
        rows = rows.filter(spectrum__snr__gte=filters.snr_min)
    if filters.snr_max is not None:
        rows = rows.filter(spectrum__snr__lte=filters.snr_max)
    return rows


def _status_rows(rows: QuerySet[Candidate], status: str) -> QuerySet[Candidate]:
    if status == "waiting":
        return rows.filter(queue_closed_reason="", needs_expert=True)
    if status == "closed":
        return rows.exclude(queue_closed_reason="")
    if status == "unrouted":
        return rows.filter(queue_closed_reason="", needs_expert=False)
    return rows


def staff_queue_rows(filters: QueueFilters) -> QuerySet[Candidate]:
    """Finished candidates by queue status and metadata, oldest first (the queue's own order
    is ``selectors.vetting_queue``'s; this is the staff's working list)."""
    rows = _status_rows(Candidate.objects.filter(state=CandidateState.DONE), filters.status)
    rows = metadata_rows(rows, filters)
    if filters.verdict:
        rows = rows.filter(verdict="" if filters.verdict == "none" else filters.verdict)
    if filters.model:
        rows = rows.filter(run__model_key=filters.model)
    if filters.assigned == "none":
        rows = rows.filter(assigned_to__isnull=True)
    elif filters.assigned:
        rows = rows.filter(assigned_to__username=filters.assigned)
    return (
        rows.select_related("run__task", "spectrum", "assigned_to")
        .defer("spectrum__arrays", "spectrum__meta", "error")
        .order_by("finished_at", "id")
    )


def queue_datasets() -> list[str]:
    """The data sets of finished candidates' spectra (the filter's choices)."""
    rows = Candidate.objects.filter(state=CandidateState.DONE).order_by()
    return sorted(rows.values_list("spectrum__dataset", flat=True).distinct())


def readable_selection(*, user: Any, candidate_ids: list[int]) -> list[int]:
    """The selected candidates ``user`` may read (the others are left out, never acted on)."""
    if not candidate_ids:
        return []
    visible = blinding.candidates_visible_to(user=user).filter(pk__in=candidate_ids)
    return sorted(visible.values_list("pk", flat=True))


def expert_for_assignment(*, username: str, candidate_ids: list[int]) -> Any:
    """The account named (blank: None, every expert), which must read every candidate:
    a candidate assigned to someone blind to it would wait in no queue."""
    username = username.strip()
    if not username:
        return None
    expert = get_user_model().objects.filter(username=username, is_active=True).first()
    if expert is None:
        raise WorkflowError(f"expert: no active account {username[:150]!r}")
    readable = blinding.candidates_visible_to(user=expert).filter(pk__in=candidate_ids).count()
    if readable != len(candidate_ids):
        raise NotAllowed(
            f"{username} may not read {len(candidate_ids) - readable} of these candidates "
            "(blinding)"
        )
    return expert
