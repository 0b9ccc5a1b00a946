"""Every read that is more than a one-line lookup."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from threading import Lock
from typing import Any

import numpy as np
import yaml
from django.conf import settings
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.urls import reverse

from agent import inspection_tasks as agent_tasks
from agent.spectra import Spectrum as SpectrumValue
from agent.spectra import spectrum_from_npz_bytes
from agent.tool import SpectralVisualizationTool, ToolResult
from agent.trajectory import Trajectory
from annotation import charts
from annotation.models import (
    Audit,
    AuditLog,
    CampaignItem,
    Candidate,
    CandidateState,
    CatalogEntry,
    Curation,
    CurationState,
    InspectionRun,
    JobState,
    JudgeScore,
    LiveStep,
    PairJudgement,
    PolicyCheckpoint,
    RatingAssignment,
    RatingCampaign,
    Rollout,
    Spectrum,
    Task,
    TrainingMetric,
    TrainingRun,
    TrajectoryVersion,
    VersionKind,
    Vote,
)
from annotation.roles import Role, user_roles


@dataclass(frozen=True)
class SpectrumFilters:
    task: str = ""
    label: str = ""
    survey: str = ""
    dataset: str = ""
    q: str = ""


def spectrum_list(*, filters: SpectrumFilters) -> QuerySet[Spectrum]:
    rows = Spectrum.objects.select_related("task").defer("arrays", "meta")
    if filters.task:
        rows = rows.filter(task__code__iexact=filters.task)
    if filters.label:
        rows = rows.filter(label=filters.label.upper())
    if filters.survey:
        rows = rows.filter(survey=filters.survey)
    if filters.dataset:
        rows = rows.filter(dataset=filters.dataset)
    if filters.q:
        rows = rows.filter(object_id__icontains=filters.q)
    return rows.order_by("id")


def spectrum_filter_choices() -> dict[str, list[str]]:
    return {
        "surveys": list(Spectrum.objects.order_by().values_list("survey", flat=True).distinct()),
        "datasets": list(Spectrum.objects.order_by().values_list("dataset", flat=True).distinct()),
        "tasks": list(Task.objects.values_list("code", flat=True)),
    }


def task_value(task: Task) -> agent_tasks.Task:
    """The agent's Task value for a database row (built-in or added by an expert)."""
    return agent_tasks.task_from_dict(
        {
            "code": task.code,
            "name": task.name,
            "question": task.question,
            "guideline": task.guideline,
            "windows": task.windows,
            "contaminants": task.contaminants,
        }
    )


class _ToolCache:
    """Per-process LRU of visualization tools, so repeated renders reuse the cached arrays."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._tools: OrderedDict[tuple[int, str], SpectralVisualizationTool] = OrderedDict()
        self._lock = Lock()

    def get(self, row: Spectrum) -> SpectralVisualizationTool:
        key = (row.pk, row.content_hash)
        with self._lock:
            tool = self._tools.get(key)
            if tool is not None:
                self._tools.move_to_end(key)
                return tool
        tool = SpectralVisualizationTool(spectrum_value(row))
        with self._lock:
            self._tools[key] = tool
            while len(self._tools) > self._size:
                self._tools.popitem(last=False)
        return tool


_tools = _ToolCache()


def spectrum_value(row: Spectrum) -> SpectrumValue:
    value = spectrum_from_npz_bytes(bytes(row.arrays))
    value.object_id = row.object_id
    value.survey = row.survey
    value.redshift = row.redshift
    return value


def spectrum_tool(row: Spectrum) -> SpectralVisualizationTool:
    return _tools.get(row)


def spectrum_render(
    *, row: Spectrum, wavelength_range: Any = None, label: str | None = None
) -> ToolResult:
    tool = spectrum_tool(row)
    if wavelength_range is None:
        return tool.render_full()
    return tool.render(wavelength_range, label=label)


def _finite_or_none(values: np.ndarray) -> list[float | None]:
    """Plain floats with None for NaN and inf (a gap in the plot). Built with tolist(): a page
    with a plot converts three arrays of thousands of pixels on every request."""
    out: list[float | None] = np.asarray(values, dtype=float).tolist()
    for index in np.flatnonzero(~np.isfinite(values)).tolist():
        out[index] = None
    return out


PLOT_DIGITS = 7  # float32 precision, what surveys store; more digits only lengthen the page


def _plot_values(values: np.ndarray) -> list[float | None]:
    """Rounded to PLOT_DIGITS significant digits of the largest value, far below what a plot
    can show: the flux, error band and hover text need no more, and the page halves in size."""
    finite = np.isfinite(values)
    scale = float(np.max(np.abs(values[finite]))) if finite.any() else 0.0
    decimals = PLOT_DIGITS - 1 - math.floor(math.log10(scale)) if scale > 0 else 0
    if scale > 0 and abs(decimals) < 300:
        values = np.round(values, decimals)
    return _finite_or_none(values)


def spectrum_plot_arrays(row: Spectrum) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Rest-frame wavelength, flux with NaN in the masked pixels, and the 1σ error (or None)."""
    value = spectrum_value(row)
    flux = np.where(value.good, value.flux, np.nan)
    error: np.ndarray | None = None
    if value.ivar is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.where(value.good & (value.ivar > 0), 1.0 / np.sqrt(value.ivar), np.nan)
    return np.asarray(value.rest_wavelength, dtype=float), flux, error


def _plot_series(
    wave: np.ndarray, flux: np.ndarray, error: np.ndarray | None, max_points: int
) -> dict[str, Any]:
    thinned = charts.thin_spectrum(wavelength=wave, flux=flux, error=error, max_points=max_points)
    lower, upper = thinned["lower"], thinned["upper"]
    return {
        "wavelength": [round(w, 3) for w in thinned["wavelength"].tolist()],
        "flux": _plot_values(thinned["flux"]),
        "lower": _plot_values(lower) if lower is not None else None,
        "upper": _plot_values(upper) if upper is not None else None,
        "n_pixels": thinned["n_pixels"],
        "decimated": thinned["decimated"],
        # From every pixel, not the thinned ones (thinning keeps each bucket's extremes).
        "y_range": charts.robust_y_range(flux),
    }


def spectrum_plot_data(*, row: Spectrum, task: Task | None) -> dict[str, Any]:
    """What the interactive plot needs: rest-frame arrays with gaps, error band, markers.

    A spectrum of more than SPECTRUM_PLOT_MAX_POINTS pixels is thinned (charts.min_max_indices);
    the plot then asks `zoom_url` for the pixels of the range it is zoomed to.
    """
    wave, flux, error = spectrum_plot_arrays(row)
    windows = task.windows if task is not None else []
    data = {
        "object_id": row.object_id,
        "rest_frame": bool(row.redshift),
        "redshift": row.redshift,
        **_plot_series(wave, flux, error, settings.SPECTRUM_PLOT_MAX_POINTS),
        "windows": [
            {
                "name": charts.plotly_text(window["name"]),
                "range": window["rest_range"],
                "lines": window.get("lines", []),
                "kind": window.get("kind", ""),
            }
            for window in windows
        ],
    }
    if data["decimated"]:
        data["zoom_url"] = reverse("api_spectrum_plot", args=[row.pk])
    return data


def spectrum_plot_window(
    *, row: Spectrum, lo: float | None, hi: float | None, max_points: int
) -> dict[str, Any]:
    """The pixels with rest wavelength in [lo, hi], thinned like the page's to max_points."""
    wave, flux, error = spectrum_plot_arrays(row)
    inside = np.ones(wave.shape, dtype=bool)
    if lo is not None:
        inside &= wave >= lo
    if hi is not None:
        inside &= wave <= hi
    return _plot_series(
        wave[inside], flux[inside], error[inside] if error is not None else None, max_points
    )


# --- curation --------------------------------------------------------------------------------


def curation_queues(*, user: Any) -> dict[str, QuerySet[Curation]]:
    """What is waiting for this expert, by stage (the "My work" page)."""
    base = curations_visible_to(
        user=user, rows=Curation.objects.select_related("task", "spectrum", "reviser")
    )
    audited_this_round = Audit.objects.filter(
        curation=OuterRef("pk"), round=OuterRef("audit_round"), auditor=user
    )
    voted = Vote.objects.filter(curation=OuterRef("pk"), voter=user)
    wrote_revision = TrajectoryVersion.objects.filter(
        curation=OuterRef("pk"), kind=VersionKind.REVISION, author=user
    )
    return {
        "screening": base.filter(state=CurationState.SCREENING),
        "revise": base.filter(
            state__in=[CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED], reviser=user
        ),
        "claim_revision": base.filter(state=CurationState.IN_REVISION, reviser__isnull=True),
        "audit": base.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(audited_this_round)),
        "claim_audit": base.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1__isnull=True) | Q(auditor_2__isnull=True))
        .exclude(reviser=user)
        .exclude(auditor_1=user)
        .exclude(auditor_2=user)
        .exclude(Exists(audited_this_round))
        .exclude(Exists(wrote_revision)),
        "vote": base.filter(state=CurationState.IN_VOTE)
        .filter(Q(reviser=user) | Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(voted)),
    }


def curation_list(*, state: str = "", task: str = "") -> QuerySet[Curation]:
    rows = Curation.objects.select_related("task", "spectrum", "reviser", "auditor_1", "auditor_2")
    if state:
        rows = rows.filter(state=state)
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("-updated_at", "-id")


def version_trajectory(version: TrajectoryVersion) -> Trajectory:
    from annotation.services import trajectory_from_stored

    return trajectory_from_stored(version.data)


def head_version(curation: Curation) -> TrajectoryVersion:
    return curation.versions.get(number=curation.head_number)


def revision_authors(curation: Curation) -> set[int]:
    """Everyone who wrote a revision of this trajectory; none of them may audit it."""
    return set(
        curation.versions.filter(kind=VersionKind.REVISION, author__isnull=False).values_list(
            "author_id", flat=True
        )
    )


def deciding_audits(curation: Curation) -> list[Audit]:
    """The audits that decide the current round: each current auditor's latest on the head.

    An audit counts only while its author holds an auditor slot, and never when the author is
    the reviser or wrote a revision, so separation of duties survives reassignment: a freed
    auditor's verdict stays on record but stops counting, even if they become the reviser.
    """
    excluded = revision_authors(curation) | {curation.reviser_id}
    holders = {
        uid
        for uid in (curation.auditor_1_id, curation.auditor_2_id)
        if uid is not None and uid not in excluded
    }
    latest: dict[int, Audit] = {}
    for audit in curation.audits.filter(
        round=curation.audit_round, version_number=curation.head_number, auditor_id__in=holders
    ).order_by("id"):
        latest[audit.auditor_id] = audit
    return list(latest.values())


def open_audit_round(curation: Curation) -> int | None:
    """The round still collecting verdicts, if any; every other round has been decided."""
    return curation.audit_round if curation.state == CurationState.IN_AUDIT else None


def audits_visible_to(*, curation: Curation, user: Any) -> list[Audit]:
    """Audits this user may see: their own always; others' once their round is decided.

    Auditors never see each other's verdict while the round is open (independent audits); a
    count of verdicts is not enough, since a freed auditor's verdict stays in the round.
    """
    audits = list(curation.audits.select_related("auditor").order_by("round", "id"))
    open_round = open_audit_round(curation)
    return [a for a in audits if a.auditor_id == user.pk or a.round != open_round]


def votes_visible_to(*, curation: Curation, user: Any) -> list[Vote]:
    """Each voter's choice is shown once all three have voted; before that, only your own."""
    votes = list(curation.votes.select_related("voter"))
    if curation.state in (CurationState.ACCEPTED, CurationState.REJECTED):
        return votes
    return [vote for vote in votes if vote.voter_id == user.pk]


def curation_history(*, curation: Curation) -> QuerySet[AuditLog]:
    return AuditLog.objects.filter(
        object_type="Curation", object_pk=str(curation.pk)
    ).select_related("actor")


def discard_entry(curation: Curation) -> AuditLog | None:
    """Who discarded this trajectory, when and why (None unless it is discarded)."""
    if curation.state != CurationState.DISCARDED:
        return None
    return curation_history(curation=curation).filter(action="screened_discard").last()


def audit_log_list(
    *, object_type: str = "", object_pk: str = "", actor: str = "", action: str = ""
) -> QuerySet[AuditLog]:
    """The audit log, newest first, filtered by object, actor (username) and action."""
    rows = AuditLog.objects.select_related("actor")
    if object_type:
        rows = rows.filter(object_type=object_type)
    if object_pk:
        rows = rows.filter(object_pk=object_pk)
    if actor:
        rows = rows.filter(actor__username=actor)
    if action:
        rows = rows.filter(action=action)
    return rows.order_by("-id")


def accepted_curations(*, task: str = "") -> QuerySet[Curation]:
    rows = Curation.objects.filter(state=CurationState.ACCEPTED).select_related("task", "spectrum")
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("id")


# --- who may read runs, candidates, trajectories and images ------------------------------------

# Roles that read inspection runs and trajectories beyond a rating assignment.
TRAJECTORY_READER_ROLES = frozenset({Role.EXPERT, Role.ML_ENGINEER, Role.VIEWER, Role.STAFF})
SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Blinding:
    """What one user may not read of runs, candidates, steps, trajectories and images.

    The rule (README, "Blinded rating"):

    - A confined rater (the rater role without expert, ML engineer, viewer or staff) reads no
      run, candidate, live step, rollout, catalog entry or curation: only the items assigned to
      them, blinded, through the rating pages and APIs, and the images those items show.
    - Anyone else who rates an OPEN campaign, whatever else they are (expert, staff, the run's
      owner), does not read while it is open: the runs that wrote its items; every candidate,
      in any run, of a spectrum one of its items shows (same content: a deterministic or
      low-temperature policy writes the same text again, and a run names its policy); the
      catalog entries of both; the curations it took items from. Each of these, set beside
      an item's text, names the item's model.
    - Everyone else reads as the page-level role checks allow (they refuse an account with
      no role at all).

    Hidden objects answer 404, like missing ones, so an id does not tell whether it exists (a
    role refusal answers 403 before any object is looked up, whatever the id); lists, counts
    and figures leave them out. Once the campaign is closed its analysis names the models
    anyway, and nothing stays hidden.
    """

    confined: bool = False
    run_ids: frozenset[int] = frozenset()
    content_hashes: frozenset[str] = frozenset()
    curation_ids: frozenset[int] = frozenset()

    def hidden_candidates(self) -> Q | None:
        """Candidates this user may not read (None: all readable); not for confined raters."""
        hidden = Q()
        if self.run_ids:
            hidden |= Q(run_id__in=self.run_ids)
        if self.content_hashes:
            hidden |= Q(spectrum__content_hash__in=self.content_hashes)
        return hidden or None


def _item_source_ids(sources: list[str], kind: str) -> set[int]:
    """The object ids behind item sources such as "rollout:12" or "curation:3@v4"."""
    ids = set()
    for source in sources:
        prefix, _, rest = source.partition(":")
        number = rest.split("@", 1)[0]
        if prefix == kind and number.isdigit():
            ids.add(int(number))
    return ids


def blinding_for(user: Any) -> Blinding:
    if user is None or not user.is_authenticated:
        return Blinding(confined=True)
    roles = user_roles(user)
    if Role.RATER in roles and not roles & TRAJECTORY_READER_ROLES:
        return Blinding(confined=True)
    rows = list(
        CampaignItem.objects.filter(campaign__closed=False, campaign__raters=user).values_list(
            "source", "spectrum__content_hash"
        )
    )
    if not rows:
        return Blinding()
    sources = [source for source, _ in rows]
    rollout_ids = _item_source_ids(sources, "rollout")
    run_ids = Rollout.objects.filter(pk__in=rollout_ids).values_list("candidate__run_id", flat=True)
    return Blinding(
        run_ids=frozenset(run_ids) if rollout_ids else frozenset(),
        content_hashes=frozenset(content_hash for _, content_hash in rows if content_hash),
        curation_ids=frozenset(_item_source_ids(sources, "curation")),
    )


def runs_visible_to(*, user: Any) -> QuerySet[InspectionRun]:
    """The inspection runs this user may read (see Blinding for the rule)."""
    blinding = blinding_for(user)
    rows = InspectionRun.objects.all()
    if blinding.confined:
        return rows.none()
    return rows.exclude(pk__in=blinding.run_ids) if blinding.run_ids else rows


def candidates_visible_to(
    *, user: Any, rows: QuerySet[Candidate] | None = None
) -> QuerySet[Candidate]:
    """``rows`` (default: every candidate) less those this user may not read, with their
    rollouts and live steps."""
    blinding = blinding_for(user)
    rows = Candidate.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    hidden = blinding.hidden_candidates()
    return rows.exclude(hidden) if hidden else rows


def catalog_entries_visible_to(
    *, user: Any, rows: QuerySet[CatalogEntry] | None = None
) -> QuerySet[CatalogEntry]:
    """``rows`` (default: every entry) less the entries this user may not read."""
    blinding = blinding_for(user)
    rows = CatalogEntry.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    if blinding.run_ids:
        rows = rows.exclude(run_id__in=blinding.run_ids)
    if blinding.content_hashes:
        same_spectra = Candidate.objects.filter(spectrum__content_hash__in=blinding.content_hashes)
        rows = rows.exclude(candidate_id__in=same_spectra.values("pk"))
    return rows


def curations_visible_to(
    *, user: Any, rows: QuerySet[Curation] | None = None
) -> QuerySet[Curation]:
    """``rows`` (default: every curation) less those this user may not read, with their
    versions."""
    blinding = blinding_for(user)
    rows = Curation.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    return rows.exclude(pk__in=blinding.curation_ids) if blinding.curation_ids else rows


def campaign_items_visible_to(*, user: Any) -> QuerySet[CampaignItem]:
    """Items whose trajectory the user may be shown: those assigned to them (to score, or in a
    pair to judge), every item of a closed campaign they rated (its item pages open then) and
    every item of a campaign they run (its creator, staff)."""
    if user is None or not user.is_authenticated:
        return CampaignItem.objects.none()
    if user.is_staff:
        return CampaignItem.objects.all()
    judged = PairJudgement.objects.filter(rater=user)
    return CampaignItem.objects.filter(
        Q(assignments__rater=user)
        | Q(pk__in=judged.values("pair__left_id"))
        | Q(pk__in=judged.values("pair__right_id"))
        | Q(campaign__closed=True, campaign__raters=user)
        | Q(campaign__created_by=user)
    )


def _holds_image(rows: QuerySet[Any], sha256: str) -> bool:
    # Trajectory dicts refer to their PNGs as {"png_sha256": "<hash>"}.
    text = rows.annotate(text=Cast("data", TextField()))
    return text.filter(text__contains=f'"{sha256}"').exists()


def image_in_candidates(*, user: Any, sha256: str, candidate_id: int | None = None) -> bool:
    """A rollout or live step the user may read shows this image (within one candidate)."""
    blinding = blinding_for(user)
    if blinding.confined:
        return False
    hidden = blinding.hidden_candidates()
    for model in (Rollout, LiveStep):
        rows = model.objects.all()
        if candidate_id is not None:
            rows = rows.filter(candidate_id=candidate_id)
        if hidden is not None:
            rows = rows.exclude(candidate__in=Candidate.objects.filter(hidden).values("pk"))
        if _holds_image(rows, sha256):
            return True
    return False


def image_in_curations(*, user: Any, sha256: str, curation_id: int | None = None) -> bool:
    """A trajectory version the user may read shows this image (within one curation)."""
    curations = curations_visible_to(user=user)
    if curation_id is not None:
        curations = curations.filter(pk=curation_id)
    versions = TrajectoryVersion.objects.filter(curation__in=curations)
    return _holds_image(versions, sha256)


def image_in_campaign_items(*, user: Any, sha256: str, campaign_id: int | None = None) -> bool:
    """A rating item the user may be shown holds this image (within one campaign)."""
    items = campaign_items_visible_to(user=user)
    if campaign_id is not None:
        items = items.filter(campaign_id=campaign_id)
    return _holds_image(items, sha256)


def image_readable(
    *,
    user: Any,
    sha256: str,
    candidate_id: int | None = None,
    curation_id: int | None = None,
    campaign_id: int | None = None,
) -> bool:
    """True when at least one object that refers to this content-addressed image, and that the
    user may read, shows it. Images are shared: two policies zooming into the same window of
    the same spectrum store one PNG. An id narrows the search to that one object's rows (the
    pages pass one, so an image costs a lookup in one object, not a scan of every table)."""
    if not SHA256_RE.fullmatch(sha256):
        return False
    if candidate_id is not None:
        return image_in_candidates(user=user, sha256=sha256, candidate_id=candidate_id)
    if curation_id is not None:
        return image_in_curations(user=user, sha256=sha256, curation_id=curation_id)
    if campaign_id is not None:
        return image_in_campaign_items(user=user, sha256=sha256, campaign_id=campaign_id)
    return (
        image_in_campaign_items(user=user, sha256=sha256)
        or image_in_curations(user=user, sha256=sha256)
        or image_in_candidates(user=user, sha256=sha256)
    )


# --- inspection runs ----------------------------------------------------------------------------


def _run_candidates(run: InspectionRun, user: Any) -> QuerySet[Candidate]:
    """The run's candidates; with a user, only those they may read, so no figure of the run
    tells a rater what a hidden candidate answered."""
    rows = run.candidates.all()
    return rows if user is None else candidates_visible_to(user=user, rows=rows)


def run_progress(*, run: InspectionRun, user: Any = None) -> dict[str, Any]:
    candidates = _run_candidates(run, user)
    counts = dict(
        candidates.order_by().values_list("state").annotate(n=Count("id")).values_list("state", "n")
    )
    total = sum(counts.values())
    done = counts.get(CandidateState.DONE, 0)
    failed = counts.get(CandidateState.FAILED, 0)
    cancelled = counts.get(CandidateState.CANCELLED, 0)
    times = candidates.filter(state=CandidateState.DONE).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    per_minute = None
    if done and times["first"] and times["last"] and times["last"] > times["first"]:
        per_minute = done / ((times["last"] - times["first"]).total_seconds() / 60.0)
    return {
        "total": total,
        "done": done,
        "failed": failed,
        "cancelled": cancelled,
        "running": counts.get(CandidateState.RUNNING, 0),
        "pending": counts.get(CandidateState.PENDING, 0),
        "remaining": total - done - failed - cancelled,
        "finished": total == done + failed + cancelled,
        "percent": round(100 * (done + failed + cancelled) / total) if total else 100,
        "per_minute": per_minute,
        "needs_expert": candidates.filter(needs_expert=True).count(),
    }


def run_metrics(*, run: InspectionRun, user: Any = None) -> dict[str, Any] | None:
    """On a labelled set: F1/accuracy, the reliability diagram and the F1-coverage curve."""
    from agent.calibration import expected_calibration_error, f1_coverage_curve, reliability_bins
    from agent.metrics import classification_report

    rows = list(
        _run_candidates(run, user)
        .filter(
            state=CandidateState.DONE, spectrum__task=run.task, spectrum__label__in=["YES", "NO"]
        )
        .values_list("spectrum__label", "verdict", "confidence")
    )
    if not rows:
        return None
    labels = [label for label, _, _ in rows]
    predictions = [verdict or None for _, verdict, _ in rows]
    confidences = [min(1.0, max(0.0, confidence or 0.0)) for _, _, confidence in rows]
    report = classification_report(labels, predictions)
    bins = reliability_bins(
        confidences, [p == t for p, t in zip(predictions, labels, strict=True)], n_bins=10
    )
    curve = f1_coverage_curve(labels, predictions, confidences)
    return {
        "n": report.n,
        "accuracy": report.accuracy,
        "f1": report.f1,
        "precision": report.precision,
        "recall": report.recall,
        "confusion": report.confusion.as_dict(),
        "ece": expected_calibration_error(bins),
        "reliability": [
            {
                "low": b.low,
                "high": b.high,
                "count": b.count,
                "confidence": b.mean_confidence,
                "accuracy": b.accuracy,
            }
            for b in bins
        ],
        "coverage": [
            {
                "coverage": p.coverage,
                "threshold": p.threshold,
                "f1": p.f1,
                "accuracy": p.accuracy,
                "n": p.n_automatic,
            }
            for p in curve
        ],
    }


def live_steps_after(*, candidate: Candidate, after: int) -> list[LiveStep]:
    return list(candidate.live_steps.filter(pk__gt=after).order_by("id"))


def inspected_ranges(steps: list[dict[str, Any]]) -> list[list[float]]:
    """The windows a trajectory's tool calls looked at (for shading the plot)."""
    ranges = []
    for step in steps:
        result = step.get("tool_result") or {}
        image = result.get("image") or {}
        if image.get("wavelength_range"):
            ranges.append(image["wavelength_range"])
    return ranges


# --- rating campaigns ------------------------------------------------------------------------------

BLINDED_KEYS = ("policy", "meta")


def blinded_trajectory(data: dict[str, Any]) -> dict[str, Any]:
    """What a rater may see of a trajectory: no policy, model or provenance."""
    return {key: value for key, value in data.items() if key not in BLINDED_KEYS}


def rater_queue(*, campaign: RatingCampaign, rater: Any) -> QuerySet[RatingAssignment]:
    return RatingAssignment.objects.filter(
        item__campaign=campaign, rater=rater, score__isnull=True
    ).select_related("item__task", "item__spectrum")


def rater_progress(*, campaign: RatingCampaign, rater: Any) -> dict[str, int]:
    # Two queries, not four: the rating page asks for this on every score.
    scores = RatingAssignment.objects.filter(item__campaign=campaign, rater=rater).aggregate(
        rated=Count("id", filter=Q(score__isnull=False)), total=Count("id")
    )
    pairs = PairJudgement.objects.filter(pair__campaign=campaign, rater=rater).aggregate(
        judged=Count("id", filter=~Q(outcome="")), pairs=Count("id")
    )
    return {
        "rated": scores["rated"],
        "total": scores["total"],
        "judged": pairs["judged"],
        "pairs": pairs["pairs"],
    }


def can_see_analysis(*, campaign: RatingCampaign, user: Any) -> bool:
    """Raters see others' scores (and the models) only once the campaign is closed."""
    if campaign.closed:
        return True
    is_rater = campaign.raters.filter(pk=user.pk).exists()
    return not is_rater and (bool(user.is_staff) or campaign.created_by_id == user.pk)


def _pairwise_analysis(campaign: RatingCampaign) -> dict[str, Any]:
    from agent.agreement import bradley_terry_bootstrap, win_tie_loss

    judgements = PairJudgement.objects.filter(pair__campaign=campaign).exclude(outcome="")
    rows = judgements.select_related("pair__left", "pair__right")
    policies = sorted(
        {name for j in rows for name in (j.pair.left.policy_name, j.pair.right.policy_name)}
    )
    if len(policies) < 2:
        return {"policies": policies, "shares": {}, "strengths": {}}
    reference = policies[0]
    outcomes: dict[str, list[str]] = {}
    comparisons: list[tuple[str, ...]] = []
    for judgement in rows:
        left, right = judgement.pair.left.policy_name, judgement.pair.right.policy_name
        if judgement.outcome == "tie":
            comparisons.append((left, right, "tie"))
        else:
            winner = left if judgement.outcome == "left" else right
            comparisons.append((winner, right if winner == left else left))
        if reference in (left, right):
            if judgement.outcome == "tie":
                relative = "tie"
            else:
                winner = left if judgement.outcome == "left" else right
                relative = "A" if winner == reference else "B"
            outcomes.setdefault(judgement.pair.dataset or "all", []).append(relative)
    shares = {dataset: s.as_dict() for dataset, s in win_tie_loss(outcomes).items()}
    strengths = {}
    if len(policies) > 2 or comparisons:
        intervals = bradley_terry_bootstrap(comparisons, n_boot=500, seed=campaign.seed, prior=0.5)
        strengths = {
            name: {"estimate": i.estimate, "low": i.lo, "high": i.hi}
            for name, i in intervals.items()
        }
    return {"policies": policies, "reference": reference, "shares": shares, "strengths": strengths}


def campaign_analysis(*, campaign: RatingCampaign) -> dict[str, Any]:
    """Figure 4 of the paper for one campaign: distributions, agreement, judges, pairwise."""
    from agent import agreement

    items = list(campaign.items.all())
    by_item_id = {item.pk: item for item in items}
    ratings = list(
        RatingAssignment.objects.filter(
            item__campaign=campaign, score__isnull=False
        ).select_related("rater")
    )
    by_rater: dict[str, dict[str, int]] = {}
    by_item: dict[str, dict[str, int]] = {}
    for rating in ratings:
        blind = by_item_id[rating.item_id].blind_id
        by_rater.setdefault(rating.rater.get_username(), {})[blind] = rating.score
        by_item.setdefault(blind, {})[rating.rater.get_username()] = rating.score
    human_scores = [r.score for r in ratings]
    human_mean = agreement.mean_scores(by_item) if by_item else {}
    judges: dict[str, dict[str, int | None]] = {}
    unscored: dict[str, int] = {}
    for score in JudgeScore.objects.filter(item__campaign=campaign).select_related("judge"):
        blind = by_item_id[score.item_id].blind_id
        judges.setdefault(score.judge.name, {})[blind] = score.score
        if score.score is None:
            unscored[score.judge.name] = unscored.get(score.judge.name, 0) + 1
    blinds = [item.blind_id for item in items]
    series: dict[str, list[float | None]] = {"human mean": [human_mean.get(b) for b in blinds]}
    for name, scores in judges.items():
        series[name] = [scores.get(b) for b in blinds]
    names, matrix = agreement.spearman_matrix(series)
    matrix_rows = agreement.rating_matrix(by_rater) if by_rater else None
    alpha = agreement.krippendorff_alpha(matrix_rows.rows, level="ordinal") if matrix_rows else None
    distributions = {"humans": human_scores} | {
        name: [s for s in scores.values() if s is not None] for name, scores in judges.items()
    }
    policy_of = {item.blind_id: item.policy_name for item in items}
    per_policy: dict[str, list[float]] = {}
    for blind, mean in human_mean.items():
        per_policy.setdefault(policy_of[blind], []).append(mean)
    return {
        "n_items": len(items),
        "n_ratings": len(ratings),
        "histograms": {
            name: agreement.score_histogram(values)
            for name, values in distributions.items()
            if values
        },
        "cdfs": {
            name: agreement.score_cdf(values) for name, values in distributions.items() if values
        },
        "spearman": {"names": names, "matrix": matrix},
        "krippendorff_alpha": alpha,
        "kappas": [
            {"a": k.rater_a, "b": k.rater_b, "n": k.n_common, "kappa": k.kappa}
            for k in agreement.pairwise_kappas(by_rater)
        ]
        if len(by_rater) > 1
        else [],
        "disagreement": [
            {"item": d.item, "spread": d.spread, "std": d.std}
            for d in agreement.disagreement(by_item)[:20]
            if d.spread > 0
        ],
        "judges_unscored": unscored,
        "policy_means": {
            name: sum(values) / len(values) for name, values in sorted(per_policy.items())
        },
        "pairwise": _pairwise_analysis(campaign),
    }


# --- training runs ------------------------------------------------------------------------------

# preset -> suffix of training/configs/<stage>_<suffix>.yaml
TRAINING_PRESETS = {"cpu-tiny": "cpu_tiny", "gpu": "gpu"}
# Keys of a preset file that choose data or outputs; a run from the app sets its own.
TRAINING_DATA_KEYS = frozenset(
    {
        "model_name_or_path",
        "output_dir",
        "run_name",
        "metrics_jsonl",
        "trajectories",
        "sharegpt",
        "smoke_tasks",
        "smoke_samples_per_task",
        "specvi_mini_tasks",
        "specvi_mini_split",
        "specvi_mini_positives",
        "specvi_mini_negatives",
        "specvi_mini_seed",
        "verl_parquet",
    }
)
# The curves of paper Figure 6 (names from training.callbacks).
CHART_METRICS = (
    "loss",
    "reward_mean",
    "tool_calls_mean",
    "val_tool_calls_mean",
    "response_length_mean",
    "val_f1",
    "batch_f1",
)


def training_preset_path(*, stage: str, preset: str) -> Path:
    return settings.BASE_DIR / "training" / "configs" / f"{stage}_{TRAINING_PRESETS[preset]}.yaml"


def training_preset_values(*, stage: str, preset: str) -> dict[str, Any]:
    """The values of a preset's YAML file (read with the same rules as training.config)."""
    path = training_preset_path(stage=stage, preset=preset)
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping of field names to values")
    return values


def training_output_root() -> Path:
    return Path(settings.TRAINING_OUTPUT_ROOT)


def label_only_spectra(
    *, dataset: str, split: str, tasks: list[str], limit: int
) -> QuerySet[Spectrum]:
    """Spectra labelled YES or NO for one of ``tasks``: the rows GRPO learns from."""
    rows = Spectrum.objects.filter(
        dataset=dataset, task__code__in=tasks, label__in=["YES", "NO"]
    ).select_related("task")
    if split:
        rows = rows.filter(split=split)
    return rows.order_by("id")[:limit]


def training_runs() -> QuerySet[TrainingRun]:
    return TrainingRun.objects.select_related(
        "job", "dataset_export", "created_by", "checkpoint", "base_checkpoint"
    ).order_by("-id")


def training_progress(*, run: TrainingRun) -> dict[str, Any]:
    job = run.job
    latest: dict[str, float] = {}
    last_step = run.metrics.filter(name__in=CHART_METRICS).order_by("-step").first()
    if last_step is not None:
        latest = dict(
            run.metrics.filter(step=last_step.step, name__in=CHART_METRICS).values_list(
                "name", "value"
            )
        )
    # A run that failed or was cancelled is as far as its steps got, not "100 %".
    percent = job.percent
    if job.state in (JobState.FAILED, JobState.CANCELLED):
        percent = min(100, round(100 * job.done / job.total)) if job.total else 0
    reason, _, details = (job.error or "").partition("\n\n")
    return {
        "state": job.state,
        "finished": job.finished,
        "step": job.done,
        "total": job.total,
        "percent": percent,
        "error": reason,
        "error_details": details,
        "latest_step": last_step.step if last_step else None,
        "latest": latest,
    }


def training_chart_points(*, run: TrainingRun, after: int = 0) -> dict[str, Any]:
    """Figure 6 series recorded after metric row ``after``: {last_id, series: {name: {x, y}}}."""
    rows = (
        run.metrics.filter(pk__gt=after, name__in=CHART_METRICS)
        .order_by("id")
        .values_list("id", "name", "step", "value")
    )
    series: dict[str, dict[str, list[float]]] = {name: {"x": [], "y": []} for name in CHART_METRICS}
    last_id = after
    for pk, name, step, value in rows:
        series[name]["x"].append(step)
        series[name]["y"].append(value)
        last_id = max(last_id, pk)
    return {"last_id": last_id, "series": series}


def training_metrics(
    *, run: TrainingRun, names: list[str] | None = None, after: int = 0
) -> QuerySet[TrainingMetric]:
    rows = run.metrics.filter(pk__gt=after)
    if names:
        rows = rows.filter(name__in=names)
    return rows.order_by("id")


def policy_checkpoints() -> QuerySet[PolicyCheckpoint]:
    return PolicyCheckpoint.objects.select_related("run", "created_by").order_by("-id")


def checkpoint_for_policy_spec(spec: dict[str, Any]) -> PolicyCheckpoint | None:
    """The registered checkpoint an inspection run's policy loads, when it is one."""
    if spec.get("kind") != "transformers" or not spec.get("model_path"):
        return None
    return PolicyCheckpoint.objects.filter(path=str(spec["model_path"])).first()


def lineage_summary(lineage: dict[str, Any]) -> dict[str, Any]:
    """What a policy chooser shows of a lineage: data, base model and the main settings."""
    config = lineage.get("config") or {}
    training = config.get("SpecvetSFTConfig") or config.get("SpecvetGRPOConfig") or {}
    model = config.get("ModelArguments") or {}
    dataset = lineage.get("dataset") or {}
    sources = dataset.get("sources") or {}
    base = lineage.get("base_lineage") or {}
    return {
        "stage": lineage.get("stage", ""),
        "base_model": lineage.get("base_model", ""),
        "base_stage": base.get("stage", ""),
        "dataset_version": lineage.get("dataset_version", ""),
        "rows": dataset.get("rows"),
        "dataset_export": sources.get("dataset_export"),
        "label_source": sources.get("label_source"),
        "learning_rate": training.get("learning_rate"),
        "num_train_epochs": training.get("num_train_epochs"),
        "max_steps": training.get("max_steps"),
        "use_lora": model.get("use_lora"),
        "lora_r": model.get("lora_r") if model.get("use_lora") else None,
        "created_at": lineage.get("created_at", ""),
        "code_version": lineage.get("code_version", ""),
        "metrics": lineage.get("metrics") or {},
    }
