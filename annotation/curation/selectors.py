"""Curation reads: queues, versions, audits and votes a user may see, diffs, trajectory views."""

from __future__ import annotations

import base64
import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import Http404

from agent.trajectory import Trajectory
from annotation import blinding
from annotation.blinding import curations_visible_to
from annotation.core.models import AuditLog, ImageBlob
from annotation.curation.models import (
    Audit,
    Curation,
    CurationState,
    DatasetExport,
    TrajectoryVersion,
    VersionKind,
    Vote,
)
from annotation.spectra.models import Label, Spectrum, Task

# --- curation --------------------------------------------------------------------------------


def curation_queues(*, user: Any) -> dict[str, QuerySet[Curation]]:
    """What is waiting for this expert, by stage (the "My work" page)."""
    # Planted copies (annotation.curation.planted) sit in the audit queues like any other audit
    # and in no other queue: after their one round they go nowhere.
    visible = curations_visible_to(
        user=user, rows=Curation.objects.select_related("task", "spectrum", "reviser")
    )
    base = visible.filter(planted=False)
    audited_the_source = Audit.objects.filter(
        curation=OuterRef("planted_error__source"), auditor=user
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
        "audit": visible.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(audited_this_round)),
        "claim_audit": visible.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1__isnull=True) | Q(auditor_2__isnull=True))
        .exclude(reviser=user)
        .exclude(auditor_1=user)
        .exclude(auditor_2=user)
        .exclude(Exists(audited_this_round))
        .exclude(Exists(wrote_revision))
        .exclude(Exists(audited_the_source)),  # who audited a copy's source would know it
        "vote": base.filter(state=CurationState.IN_VOTE)
        .filter(Q(reviser=user) | Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(voted)),
    }


def curation_list(*, state: str = "", task: str = "") -> QuerySet[Curation]:
    """Every trajectory; a planted copy only while it is in audit, as a real one would be there
    (auditors see it listed where they expect it), and nowhere once its round is over."""
    rows = Curation.objects.select_related(
        "task", "spectrum", "reviser", "auditor_1", "auditor_2"
    ).filter(Q(planted=False) | Q(state=CurationState.IN_AUDIT))
    if state:
        rows = rows.filter(state=state)
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("-updated_at", "-id")


def version_trajectory(version: TrajectoryVersion) -> Trajectory:

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


def accepted_curations(*, task: str = "") -> QuerySet[Curation]:
    rows = Curation.objects.filter(state=CurationState.ACCEPTED, planted=False).select_related(
        "task", "spectrum"
    )
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("id")


LIST_DEFER = ("spectrum__arrays", "spectrum__meta")  # lists never need the arrays
# What the list pages show; loading only that (not each row's task definition and spectrum
# metadata) halves the cost of a list on the pages experts open most.
QUEUE_FIELDS = ("id", "state", "updated_at", "task__code", "spectrum__object_id", "reviser")
LIST_FIELDS = (
    *QUEUE_FIELDS,
    "ground_truth",
    "head_number",
    "reviser__username",
    "auditor_1__username",
    "auditor_2__username",
)


# --- reads shared by pages and the API (selector candidates) ------------------------------------


@dataclass(frozen=True)
class StepView:
    index: int  # position in the trajectory (audit step comments are keyed by it)
    think: str
    raw: str  # the assistant turn as written
    tool_name: str
    arguments: str  # the call's arguments as JSON text
    wavelength_range: tuple[float, float] | None
    label: str
    result_ok: bool | None
    result_text: str
    image_sha: str | None

    @property
    def number(self) -> int:
        return self.index + 1

    @property
    def call_text(self) -> str:
        if self.wavelength_range is None:
            return self.arguments
        low, high = self.wavelength_range
        return f"[{low:g}, {high:g}] {self.label}".strip()


@dataclass(frozen=True)
class AnswerView:
    index: int
    think: str
    prediction: str | None
    justification: str


@dataclass(frozen=True)
class TrajectoryView:
    user_prompt: str
    initial_image_sha: str | None
    steps: list[StepView]  # every turn but the final answer
    answer: AnswerView | None
    stop_reason: str | None
    format_ok: bool | None
    format_reasons: list[str]


def _step_view(step: dict[str, Any]) -> StepView:
    call = step.get("tool_call") or {}
    result = step.get("tool_result") or {}
    image = result.get("image") or {}
    wavelength_range = call.get("wavelength_range")
    return StepView(
        index=int(step.get("index", 0)),
        think=step.get("think") or "",
        raw=step.get("assistant_text") or "",
        tool_name=call.get("name") or "",
        arguments=json.dumps(call.get("arguments") or {}, ensure_ascii=False) if call else "",
        wavelength_range=tuple(sorted(wavelength_range)) if wavelength_range else None,
        label=(call.get("label") or "").strip(),
        result_ok=result.get("ok") if result else None,
        result_text=result.get("text") or "",
        image_sha=image.get("png_sha256"),
    )


def trajectory_view(data: dict[str, Any]) -> TrajectoryView:
    """What pages show of a stored trajectory, read from the stored dict (no PNG decoding)."""
    steps = list(data.get("steps") or [])
    answer = data.get("answer")
    answer_view = None
    if answer is not None and steps:
        last = steps.pop()
        answer_view = AnswerView(
            index=int(last.get("index", len(steps))),
            think=last.get("think") or "",
            prediction=answer.get("prediction"),
            justification=answer.get("justification") or "",
        )
    return TrajectoryView(
        user_prompt=data.get("user_prompt") or "",
        initial_image_sha=(data.get("initial_image") or {}).get("png_sha256"),
        steps=[_step_view(step) for step in steps],
        answer=answer_view,
        stop_reason=data.get("stop_reason"),
        format_ok=data.get("format_ok"),
        format_reasons=list(data.get("format_reasons") or []),
    )


def inspected_ranges(data: dict[str, Any]) -> list[list[float]]:
    """Every window the trajectory's tool calls showed ([lo, hi], the plot's frame)."""
    ranges = []
    for step in data.get("steps") or []:
        result = step.get("tool_result") or {}
        shown = (result.get("image") or {}).get("wavelength_range")
        if not shown and result.get("ok"):
            shown = (step.get("tool_call") or {}).get("wavelength_range")
        if shown:
            low, high = sorted(float(value) for value in shown)
            ranges.append([low, high])
    return ranges


@dataclass(frozen=True)
class Segment:
    op: str  # "equal" | "insert" | "delete"
    text: str


_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")


def text_diff(old: str, new: str) -> list[Segment]:
    """A word-level diff as segments; templates render them (escaped) in <ins>/<del>."""
    before, after = _TOKENS.findall(old), _TOKENS.findall(new)
    segments: list[Segment] = []

    def add(op: str, tokens: list[str]) -> None:
        if not tokens:
            return
        if segments and segments[-1].op == op:
            segments[-1] = Segment(op, segments[-1].text + "".join(tokens))
        else:
            segments.append(Segment(op, "".join(tokens)))

    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            add("equal", before[i1:i2])
        else:
            add("delete", before[i1:i2])
            add("insert", after[j1:j2])
    return segments


def _changed(segments: list[Segment]) -> bool:
    return any(segment.op != "equal" for segment in segments)


@dataclass(frozen=True)
class StepDiff:
    position: int  # 1-based position in the comparison
    old: StepView | None
    new: StepView | None
    think: list[Segment]
    call: list[Segment]

    @property
    def changed(self) -> bool:
        return _changed(self.think) or _changed(self.call)

    @property
    def comment_key(self) -> str:
        """Audit step comments are keyed by the step index in the audited (new) version."""
        step = self.new or self.old
        return str(step.index if step else self.position - 1)


@dataclass(frozen=True)
class AnswerDiff:
    old: AnswerView | None
    new: AnswerView | None
    think: list[Segment]
    justification: list[Segment]

    @property
    def prediction_changed(self) -> bool:
        old = self.old.prediction if self.old else None
        new = self.new.prediction if self.new else None
        return old != new

    @property
    def comment_key(self) -> str:
        answer = self.new or self.old
        return str(answer.index if answer else 0)


@dataclass(frozen=True)
class VersionDiff:
    old: TrajectoryVersion
    new: TrajectoryVersion
    steps: list[StepDiff]
    answer: AnswerDiff


def version_diff(old: TrajectoryVersion, new: TrajectoryVersion) -> VersionDiff:
    """Tool steps paired by position, then the final answers; text diffs per field."""
    before, after = trajectory_view(old.data), trajectory_view(new.data)
    steps = []
    for position in range(max(len(before.steps), len(after.steps))):
        a = before.steps[position] if position < len(before.steps) else None
        b = after.steps[position] if position < len(after.steps) else None
        steps.append(
            StepDiff(
                position=position + 1,
                old=a,
                new=b,
                think=text_diff(a.think if a else "", b.think if b else ""),
                call=text_diff(a.call_text if a else "", b.call_text if b else ""),
            )
        )
    answer = AnswerDiff(
        old=before.answer,
        new=after.answer,
        think=text_diff(
            before.answer.think if before.answer else "", after.answer.think if after.answer else ""
        ),
        justification=text_diff(
            before.answer.justification if before.answer else "",
            after.answer.justification if after.answer else "",
        ),
    )
    return VersionDiff(old=old, new=new, steps=steps, answer=answer)


def history_visible_to(*, curation: Curation, user: AbstractBaseUser) -> QuerySet[AuditLog]:
    """The audit log without what blinding hides: another auditor's verdict while its round is
    open, and another voter's vote before the vote has closed."""
    rows = curation_history(curation=curation)
    open_round = open_audit_round(curation)
    if open_round is not None:
        rows = rows.exclude(
            Q(action__in=AUDIT_ACTIONS) & ~Q(actor=user) & Q(data__round=open_round)
        )
    if curation.state not in (CurationState.ACCEPTED, CurationState.REJECTED):
        rows = rows.exclude(Q(action__in=VOTE_ACTIONS) & ~Q(actor=user))
    return rows.order_by("id")


def image_is_readable(*, sha256: str, user: AbstractBaseUser, curation_id: int | None) -> bool:
    """An image may be read when a trajectory version the user may read holds it, optionally
    within one curation."""
    return blinding.image_in_curations(user=user, sha256=sha256, curation_id=curation_id)


def draft_candidates(
    *, task: Task, dataset: str = "", split: str = "", label: str = "", skip_curated: bool = True
) -> QuerySet[Spectrum]:
    """Labelled spectra of a task a draft job may take, oldest first."""
    rows = Spectrum.objects.filter(task=task, label__in=Label.values).defer("arrays", "meta")
    if dataset:
        rows = rows.filter(dataset=dataset)
    if split:
        rows = rows.filter(split=split)
    if label:
        rows = rows.filter(label=label)
    if skip_curated:
        rows = rows.exclude(Exists(Curation.objects.filter(spectrum=OuterRef("pk"), task=task)))
    return rows.order_by("id")


def accepted_counts(*, user: Any) -> list[dict[str, Any]]:
    """Accepted trajectories per task, with YES and NO counts, of the curations ``user`` may
    read (blinding: a curation of a campaign they rate counts nowhere while it is open)."""
    table: dict[str, dict[str, Any]] = {}
    visible = curations_visible_to(user=user, rows=accepted_curations())
    rows = visible.order_by().values("task__code", "ground_truth").annotate(n=Count("id"))
    for row in rows:
        entry = table.setdefault(
            row["task__code"], {"task": row["task__code"], "YES": 0, "NO": 0, "total": 0}
        )
        entry[row["ground_truth"]] += row["n"]
        entry["total"] += row["n"]
    return [table[code] for code in sorted(table)]


def latest_standardized(curation: Curation) -> TrajectoryVersion | None:
    return (
        curation.versions.filter(kind=VersionKind.STANDARDIZED)
        .select_related("author")
        .order_by("-number")
        .first()
    )


def standardizer_of(version: TrajectoryVersion) -> dict[str, Any]:
    try:
        value = json.loads(version.comment or "{}")
    except json.JSONDecodeError:
        return {"name": version.comment}
    return value if isinstance(value, dict) else {"name": str(value)}


AUDIT_ACTIONS = ("audit_approve", "audit_request_changes")


VOTE_ACTIONS = ("vote_accept", "vote_reject")


def label_step_comments(curation: Curation, audits: list[Audit]) -> list[Audit]:
    """Give each audit `comment_rows`: (label, text) per comment, in trajectory order, the
    comment on the final answer labelled as such (its key is the answer turn's index, one past
    the last tool step: shown as a step number it read "Step 3" of a 2-step trajectory)."""
    numbers = {audit.version_number for audit in audits if audit.step_comments}
    answers = {
        number: trajectory_view(data).answer
        for number, data in curation.versions.filter(number__in=numbers).values_list(
            "number", "data"
        )
    }
    for audit in audits:
        answer = answers.get(audit.version_number)
        answer_key = str(answer.index) if answer is not None else None
        rows = []
        for key, text in sorted(
            (audit.step_comments or {}).items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0
        ):
            label = "Final answer" if key == answer_key else f"Step {int(key) + 1}"
            rows.append((label, text))
        audit.comment_rows = rows  # type: ignore[attr-defined]
        audit.answer_key = answer_key  # type: ignore[attr-defined]
        audit.answer_comment = dict(audit.step_comments or {}).get(answer_key or "", "")  # type: ignore[attr-defined]
    return audits


def trajectory_from_stored(data: dict[str, Any]) -> Trajectory:
    return Trajectory.from_dict(_inline_images(data))


def _inline_images(node: Any) -> Any:
    """Walk a stored trajectory dict, replacing blob hashes by the inline base64 PNGs."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "png_sha256":
                blob = ImageBlob.objects.get(sha256=value)
                out["png_base64"] = base64.b64encode(bytes(blob.png)).decode("ascii")
            else:
                out[key] = _inline_images(value)
        return out
    if isinstance(node, list):
        return [_inline_images(item) for item in node]
    return node


def next_to_screen(after: Curation) -> Curation | None:
    """The next trajectory waiting for screening after ``after``, wrapping around."""
    rows = Curation.objects.filter(state=CurationState.SCREENING).exclude(pk=after.pk)
    return rows.filter(pk__gt=after.pk).order_by("pk").first() or rows.order_by("pk").first()


def dataset_exports(*, user: Any, kind: str = "") -> QuerySet[DatasetExport]:
    """The training data exports (of ``kind``, default all) this user may read, newest version
    first (annotation/blinding.py: one holding a curation of a campaign they rate is left out
    while it is open)."""
    rows = DatasetExport.objects.select_related("created_by").order_by("-version")
    if kind:
        rows = rows.filter(kind=kind)
    return blinding.dataset_exports_visible_to(user=user, rows=rows)


class ArchiveMissing(Http404):
    """An export whose zip is no longer in storage: a 404 that says so (not a 500)."""


def dataset_export_archive(export: DatasetExport) -> File:
    """The export's zip, opened for reading; ArchiveMissing (a 404 with the reason) when the
    file was deleted or moved out of MEDIA_ROOT since the export was made."""
    try:
        return export.archive.open("rb")
    except (FileNotFoundError, ValueError):  # ValueError: the row names no file at all
        raise ArchiveMissing(
            f"the archive of {export.kind} export version {export.version} "
            f"({export.archive.name or 'no file'}) is missing from the server's storage; "
            "make a new export, or ask staff to restore MEDIA_ROOT"
        ) from None


def audit_default_base_number(curation: Curation) -> int:
    """The version an audit's diff starts from: the one audited in the round before (round 2
    compares what was audited, v2, with the revision, v3), or v1 in the first round."""
    audited = (
        curation.audits.filter(round__lt=curation.audit_round)
        .order_by("-round", "-version_number")
        .values_list("version_number", flat=True)
        .first()
    )
    return int(audited) if audited else 1
