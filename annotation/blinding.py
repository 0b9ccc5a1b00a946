"""Who may read runs, candidates, trajectories and images: the read rule that spans domains.

A rater of a blinded campaign must not learn which policy wrote what they rate, so every
domain's pages and APIs ask here before showing a run, a candidate, a trajectory or a PNG.
It sits above the domains' models and below their views (README: Blinded rating)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import CharField, Q, QuerySet, TextField
from django.db.models.functions import Cast

from annotation import gold_masking
from annotation.core.models import Job
from annotation.core.roles import Role, user_roles
from annotation.curation.models import (
    Curation,
    DatasetExport,
    TrajectoryVersion,
)
from annotation.inspections.decision_history import HistoryRow, decision_history
from annotation.inspections.models import (
    Candidate,
    CatalogEntry,
    ExpertDecision,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.rating.models import (
    CampaignItem,
    PairJudgement,
    RatingAssignment,
    RatingCampaign,
)
from annotation.spectra.models import Spectrum

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


def _items_blinding(rows: list[tuple[str, str | None]]) -> Blinding:
    """What open campaign items, as (source, content hash) rows, hide from their raters."""
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


def _rated_open_items(user: Any) -> QuerySet[CampaignItem]:
    return CampaignItem.objects.filter(campaign__closed=False, campaign__raters=user)


def blinding_for(user: Any) -> Blinding:
    if user is None or not user.is_authenticated:
        return Blinding(confined=True)
    roles = user_roles(user)
    if Role.RATER in roles and not roles & TRAJECTORY_READER_ROLES:
        return Blinding(confined=True)
    return _items_blinding(
        list(_rated_open_items(user).values_list("source", "spectrum__content_hash"))
    )


@dataclass(frozen=True)
class HiddenByCampaign:
    """The candidates one open campaign the user rates hides from them."""

    campaign_id: int
    name: str
    count: int


@dataclass(frozen=True)
class HiddenCandidates:
    """How many of some candidates the blinding rule hides from a user, and why: the open
    campaigns they rate that hide them (a candidate two campaigns hide counts once in
    ``count``, and once in each campaign's)."""

    count: int = 0
    campaigns: tuple[HiddenByCampaign, ...] = ()


def candidates_hidden_from(*, user: Any, rows: QuerySet[Candidate]) -> HiddenCandidates:
    """Of ``rows``, those ``candidates_visible_to`` leaves out for ``user``, counted, by the
    open campaigns they rate (the vetting queue says why it is short). A confined rater is
    told nothing: they read no candidate at all, hidden or not."""
    blinding = blinding_for(user)
    hidden = None if blinding.confined else blinding.hidden_candidates()
    if hidden is None:
        return HiddenCandidates()
    count = rows.filter(hidden).count()
    if not count:
        return HiddenCandidates()
    by_campaign: dict[int, list[tuple[str, str | None]]] = {}
    names: dict[int, str] = {}
    for campaign_id, name, source, content_hash in (
        _rated_open_items(user)
        .order_by("campaign_id", "pk")
        .values_list("campaign_id", "campaign__name", "source", "spectrum__content_hash")
    ):
        by_campaign.setdefault(campaign_id, []).append((source, content_hash))
        names[campaign_id] = name
    campaigns = []
    for campaign_id, items in by_campaign.items():
        campaign_hides = _items_blinding(items).hidden_candidates()
        n = rows.filter(campaign_hides).count() if campaign_hides is not None else 0
        if n:
            campaigns.append(HiddenByCampaign(campaign_id, names[campaign_id], n))
    return HiddenCandidates(count=count, campaigns=tuple(campaigns))


def spectra_visible_to(*, user: Any, rows: QuerySet[Spectrum]) -> QuerySet[Spectrum]:
    """``rows`` less the spectra whose candidates this user may not read (the same content as
    an item of an open campaign they rate): listed beside their verdicts and labels, as "find
    more like this" lists them, they would name the item's model. None for a confined rater."""
    blinding = blinding_for(user)
    if blinding.confined:
        return rows.none()
    if blinding.content_hashes:
        rows = rows.exclude(content_hash__in=blinding.content_hashes)
    return rows


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
    """``rows`` (default: every entry) less the entries this user may not read, with what
    vetting said blanked on the entries of the gold items waiting for them (gold_masking)."""
    blinding = blinding_for(user)
    rows = CatalogEntry.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    if blinding.run_ids:
        rows = rows.exclude(run_id__in=blinding.run_ids)
    if blinding.content_hashes:
        same_spectra = Candidate.objects.filter(spectrum__content_hash__in=blinding.content_hashes)
        rows = rows.exclude(candidate_id__in=same_spectra.values("pk"))
    return gold_masking.mask_entries(rows, gold_masking.gold_mask_for(user))


def expert_decisions_visible_to(
    *, user: Any, rows: QuerySet[ExpertDecision] | None = None
) -> QuerySet[ExpertDecision]:
    """``rows`` (default: every decision) less the decisions on candidates this user may not
    read and on the spectra of the gold items waiting for them (gold_masking)."""
    blinding = blinding_for(user)
    rows = ExpertDecision.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    hidden = blinding.hidden_candidates()
    if hidden is not None:
        rows = rows.exclude(candidate__in=Candidate.objects.filter(hidden).values("pk"))
    gold = gold_masking.gold_mask_for(user).candidates("candidate__")
    return rows.exclude(gold) if gold is not None else rows


def decision_history_visible_to(*, user: Any, spectrum_id: int, task_id: int) -> list[HistoryRow]:
    """Every expert answer on the spectrum for the task (``decision_history``: any run, each
    marked current or replaced) that this user may read: answers on runs they may not read and
    on the spectra of gold items waiting for them are left out."""
    history = decision_history(
        spectrum_id=spectrum_id, task_id=task_id, runs=runs_visible_to(user=user)
    )
    if not history:
        return []
    readable = set(
        expert_decisions_visible_to(
            user=user,
            rows=ExpertDecision.objects.filter(pk__in=[row.decision.pk for row in history]),
        ).values_list("pk", flat=True)
    )
    return [row for row in history if row.decision.pk in readable]


def vetted_label_visible_to(*, user: Any, spectrum_id: int, task_id: int) -> Any:
    """The spectrum's vetted label for the task (a SpectrumLabel), or None when it has none or
    when it is the answer of a gold item waiting for this user (gold_masking)."""
    from annotation.spectra.models import Spectrum, SpectrumLabel

    label = (
        SpectrumLabel.objects.filter(spectrum_id=spectrum_id, task_id=task_id)
        .select_related("task")
        .first()
    )
    if label is None:
        return None
    mask = gold_masking.gold_mask_for(user)
    content_hash = (
        Spectrum.objects.filter(pk=spectrum_id).values_list("content_hash", flat=True).first()
        if mask
        else ""
    )
    hidden = mask.hides(
        spectrum_id=spectrum_id, task_code=label.task.code, content_hash=content_hash or ""
    )
    return None if hidden else label


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


def dataset_exports_visible_to(
    *, user: Any, rows: QuerySet[DatasetExport] | None = None
) -> QuerySet[DatasetExport]:
    """``rows`` (default: every training data export) less those holding a curation, a run's
    rollouts or a spectrum this user may not read: an export names its curations and holds
    their trajectories. One made before its curations were recorded counts as holding any."""
    blinding = blinding_for(user)
    rows = DatasetExport.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    hidden = _hidden_export_ids(blinding, rows)
    return rows.exclude(pk__in=hidden) if hidden else rows


def _hidden_export_ids(blinding: Blinding, rows: QuerySet[DatasetExport]) -> list[int]:
    if not (blinding.curation_ids or blinding.run_ids or blinding.content_hashes):
        return []
    # Compared in Python: JSON containment lookups differ by database, and exports are versions
    # of a few datasets (tens, not millions).
    return [
        pk
        for pk, curation_ids, run_ids, hashes in rows.values_list(
            "pk", "curation_ids", "run_ids", "content_hashes"
        )
        if _export_shows_hidden(blinding, curation_ids, run_ids, hashes)
    ]


def _export_shows_hidden(
    blinding: Blinding, curation_ids: Any, run_ids: Any, content_hashes: Any
) -> bool:
    """An export shows what the user may not read: one of their hidden curations (an export
    made before its curations were recorded counts as holding any), a hidden run's rollouts or
    a spectrum an item of their open campaign shows (the later export kinds record both)."""
    if blinding.curation_ids and (
        curation_ids is None or blinding.curation_ids & set(curation_ids)
    ):
        return True
    return bool(
        blinding.run_ids & set(run_ids or ()) or blinding.content_hashes & set(content_hashes or ())
    )


def label_exports_visible_to(*, user: Any, rows: QuerySet[Any] | None = None) -> QuerySet[Any]:
    """``rows`` (default: every vetted-label export) less those holding a spectrum an item of
    the user's open campaign shows, or decisions made on a run behind its items (the decision
    names the verdict its expert saw). Exports carry both: rows their spectra's content hashes,
    the manifest its decisions (and, from now on, their runs)."""
    from annotation.spectra.models import LabelExport

    blinding = blinding_for(user)
    rows = LabelExport.objects.all() if rows is None else rows
    if blinding.confined:
        return rows.none()
    hidden = _hidden_label_export_ids(blinding, rows)
    # Gold masking: an export holding the spectrum (any copy) of a gold item waiting for the
    # user holds its answer, and its manifest counts it.
    gold = gold_masking.gold_mask_for(user)
    hidden |= _label_exports_holding(rows, {content_hash for content_hash, _ in gold.contents})
    return rows.exclude(pk__in=hidden) if hidden else rows


def _label_exports_holding(rows: QuerySet[Any], content_hashes: set[str]) -> set[int]:
    """The exports with a row about a spectrum of these contents."""
    if not content_hashes:
        return set()
    # Searched as text in the database, as images are: an export holds up to 100,000 rows, and
    # a hash is 64 hex digits no other field of a row can hold.
    text = rows.annotate(rows_text=Cast("rows", TextField()))
    holds = Q()
    for content_hash in sorted(content_hashes):
        holds |= Q(rows_text__contains=f'"{content_hash}"')
    return set(text.filter(holds).values_list("pk", flat=True))


def _hidden_label_export_ids(blinding: Blinding, rows: QuerySet[Any]) -> set[int]:
    hidden = _label_exports_holding(rows, set(blinding.content_hashes))
    if blinding.run_ids:
        hidden.update(_label_exports_from_runs(blinding.run_ids, rows.exclude(pk__in=hidden)))
    return hidden


def _label_exports_from_runs(run_ids: frozenset[int], rows: QuerySet[Any]) -> set[int]:
    """The exports resting on a decision about a candidate of these runs: by the runs the
    manifest names, or, for an export made before it named them, by its decisions."""
    decided_on_runs: set[int] | None = None
    found = set()
    for pk, manifest in rows.values_list("pk", "manifest"):
        manifest = manifest if isinstance(manifest, dict) else {}
        if "run_ids" in manifest:
            if run_ids & set(manifest["run_ids"] or ()):
                found.add(pk)
            continue
        if decided_on_runs is None:
            decided_on_runs = set(
                ExpertDecision.objects.filter(candidate__run_id__in=run_ids).values_list(
                    "pk", flat=True
                )
            )
        if decided_on_runs & set(manifest.get("decisions") or ()):
            found.add(pk)
    return found


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


# The runner names (core.jobs registry) of the jobs hidden_jobs looks into; by name, as the
# runners register them, since their modules import this one.
BLINDED_JOB_KINDS = (
    "draft",
    "standardize",
    "enqueue_candidates",
    "inspection_recheck",
    "evidence_ablation",
)


def _job_touches(kind: str, params: Any, blinding: Blinding, spectra: set[int]) -> bool:
    values = params if isinstance(params, dict) else {}
    if kind == "draft":
        return bool(spectra & set(values.get("spectrum_ids") or []))
    if kind == "standardize":
        return bool(blinding.curation_ids & set(values.get("curation_ids") or []))
    return values.get("run_id") in blinding.run_ids  # the run jobs: enqueue, recheck, ablation


def hidden_jobs(user: Any) -> Q | None:
    """The background jobs whose parameters or results would name the model behind an item this
    user rates in an open campaign (the job read rule core applies; annotation.apps registers
    it): the draft jobs of its curations and of its items' spectra (a draft job's result names
    its teacher), the standardizer jobs of its curations, and the jobs that sent or re-checked
    its runs' candidates. Confined raters read no job page at all (role rule)."""
    blinding = blinding_for(user)
    if blinding.confined:
        return None
    hidden_ids = _hidden_job_ids(blinding) | _gold_hidden_job_ids(user)
    return Q(pk__in=hidden_ids) if hidden_ids else None


EVALUATION_JOB_KIND = "evaluation"  # annotation.inspections.evaluations, by name as above


def evaluation_vetted_withheld(*, user: Any, job: Job) -> bool:
    """Whether the vetted part of an evaluation job's figures is withheld from ``user``: it
    scored the answer of a gold item waiting for them (gold_masking)."""
    return gold_masking.withholds_evaluation(gold_masking.gold_mask_for(user), job.result)


def _gold_hidden_job_ids(user: Any) -> set[int]:
    """The evaluation jobs whose result (its vetted part) scored the answer of a gold item
    waiting for this user: the job pages and APIs show the whole result."""
    mask = gold_masking.gold_mask_for(user)
    if not mask:
        return set()
    rows = Job.objects.filter(kind=EVALUATION_JOB_KIND).values_list("pk", "result")
    return {pk for pk, result in rows if gold_masking.withholds_evaluation(mask, result)}


def _hidden_job_ids(blinding: Blinding) -> set[int]:
    from annotation.spectra.models import Spectrum

    if not (blinding.run_ids or blinding.content_hashes or blinding.curation_ids):
        return set()
    draft_jobs = set(
        Curation.objects.filter(pk__in=blinding.curation_ids)
        .exclude(draft_job=None)
        .values_list("draft_job_id", flat=True)
    )
    spectra = set(
        Spectrum.objects.filter(content_hash__in=blinding.content_hashes).values_list(
            "pk", flat=True
        )
    )
    hidden_ids = set(draft_jobs)
    # JSON parameters are compared in Python: JSON containment lookups differ by database, and
    # these kinds of jobs number in the hundreds, not millions
    rows = Job.objects.filter(kind__in=BLINDED_JOB_KINDS).values_list("pk", "kind", "params")
    hidden_ids.update(
        pk for pk, kind, params in rows if _job_touches(kind, params, blinding, spectra)
    )
    return hidden_ids


# --- which audit log entries a user may read ------------------------------------------------------

# The object types (AuditLog.object_type) whose entries follow their object's read rule here.
BLINDED_AUDIT_TYPES = (
    "InspectionRun",
    "Candidate",
    "Curation",
    "DatasetExport",
    "Job",
    "RatingAssignment",
    "PairJudgement",
)


def _as_object_pks(rows: QuerySet[Any]) -> QuerySet[Any]:
    """Primary keys as AuditLog.object_pk holds them (text), for a subquery."""
    return rows.annotate(object_pk_text=Cast("pk", CharField())).values("object_pk_text")


def hidden_audit_entries(user: Any) -> Q | None:
    """The audit log entries ``user`` may not read: those about an object that answers 404 to
    them (a run, candidate, curation, SFT export or job hidden by the blinding rule), and, in an
    open campaign they rate, the other raters' scores and pair judgements (raters see others'
    scores only once it closes). Core's audit log asks here (annotation.apps registers it)."""
    blinding = blinding_for(user)
    if blinding.confined:
        return Q(object_type__in=BLINDED_AUDIT_TYPES)
    hidden = Q()
    if blinding.run_ids:
        hidden |= Q(object_type="InspectionRun", object_pk__in=[str(pk) for pk in blinding.run_ids])
    candidates = blinding.hidden_candidates()
    if candidates is not None:
        hidden |= Q(
            object_type="Candidate",
            object_pk__in=_as_object_pks(Candidate.objects.filter(candidates)),
        )
    if blinding.curation_ids:
        hidden |= Q(object_type="Curation", object_pk__in=[str(pk) for pk in blinding.curation_ids])
    if exports := _hidden_export_ids(blinding, DatasetExport.objects.all()):
        hidden |= Q(object_type="DatasetExport", object_pk__in=[str(pk) for pk in exports])
    if jobs := _hidden_job_ids(blinding):
        hidden |= Q(object_type="Job", object_pk__in=[str(pk) for pk in jobs])
    rated_open = RatingCampaign.objects.filter(closed=False, raters=user)
    others_scores = RatingAssignment.objects.filter(item__campaign__in=rated_open).exclude(
        rater=user
    )
    others_judgements = PairJudgement.objects.filter(pair__campaign__in=rated_open).exclude(
        rater=user
    )
    if rated_open.exists():
        hidden |= Q(object_type="RatingAssignment", object_pk__in=_as_object_pks(others_scores))
        hidden |= Q(object_type="PairJudgement", object_pk__in=_as_object_pks(others_judgements))
    return hidden or None
