"""The curation rules of paper section 3.2, enforced in annotation/curation/services.py."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from agent.editing import EditedAnswer, EditedStep, apply_edit, edit_from_trajectory
from annotation.core import errors as core_errors
from annotation.core.models import AuditLog
from annotation.curation import datasets as curation_datasets
from annotation.curation import selectors as curation_selectors
from annotation.curation import services as curation_services
from annotation.curation.models import CurationState, DatasetExport, TrajectoryVersion
from annotation.spectra import selectors as spectra_selectors
from tests.factories import UserFactory, make_curation

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviser(db):
    return UserFactory(username="reviser")


@pytest.fixture
def first_auditor(db):
    """One of the two auditors; no roles, as the services check parts, not roles."""
    return UserFactory(username="auditor")


@pytest.fixture
def second_auditor(db):
    return UserFactory(username="second_auditor")


@pytest.fixture
def bystander(db):
    """No roles and no part in the curation (the shared outsider is an expert)."""
    return UserFactory(username="outsider")


@pytest.fixture
def curation(db):
    return make_curation()


def revise(curation, user, *, think="Zoom on the core.", window=(6540.0, 6590.0)):
    head = curation_selectors.head_version(curation)
    base = curation_selectors.version_trajectory(head)
    _, answer = edit_from_trajectory(base)
    edited = apply_edit(
        base,
        tool=spectra_selectors.spectrum_tool(curation.spectrum),
        steps=[EditedStep(think, window, "H-alpha core")],
        answer=answer,
    )
    return curation_services.curation_save_revision(
        curation=curation, user=user, base_number=head.number, trajectory=edited
    )


def to_audit(curation, reviser, first_auditor, second_auditor):
    curation_services.curation_screen(curation=curation, user=first_auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    revise(curation, reviser)
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    curation_services.curation_claim_audit(curation=curation, user=first_auditor)
    curation_services.curation_claim_audit(curation=curation, user=second_auditor)
    curation.refresh_from_db()
    return curation


def approve_both(curation, first_auditor, second_auditor):
    for user in (first_auditor, second_auditor):
        curation_services.audit_submit(
            curation=curation, user=user, version_number=curation.head_number, verdict="approve"
        )
    curation.refresh_from_db()


def test_it_walks_a_trajectory_through_the_whole_loop(
    curation, reviser, first_auditor, second_auditor, django_capture_on_commit_callbacks
):
    to_audit(curation, reviser, first_auditor, second_auditor)
    curation_services.audit_submit(
        curation=curation,
        user=first_auditor,
        version_number=curation.head_number,
        verdict="request_changes",
        step_comments={"0": "The window misses the blue wing."},
    )
    curation_services.audit_submit(
        curation=curation,
        user=second_auditor,
        version_number=curation.head_number,
        verdict="approve",
    )
    curation.refresh_from_db()
    assert curation.state == CurationState.CHANGES_REQUESTED
    revise(curation, reviser, window=(6480.0, 6650.0))
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    curation.refresh_from_db()
    assert curation.audit_round == 2
    with django_capture_on_commit_callbacks(execute=True):
        approve_both(curation, first_auditor, second_auditor)
    curation.refresh_from_db()
    assert curation.state == CurationState.IN_VOTE
    for user in (reviser, first_auditor, second_auditor):
        curation_services.vote_cast(curation=curation, user=user, value="accept")
    curation.refresh_from_db()
    assert curation.state == CurationState.ACCEPTED

    kinds = list(TrajectoryVersion.objects.filter(curation=curation).values_list("kind", flat=True))
    assert kinds == ["draft", "revision", "revision", "standardized"]
    states = list(
        AuditLog.objects.filter(object_type="Curation", object_pk=str(curation.pk))
        .exclude(to_state="")
        .values_list("to_state", flat=True)
    )
    assert states[0] == "drafted"
    assert "changes_requested" in states
    assert states[-1] == "accepted"

    export = curation_datasets.dataset_export_create(actor=reviser)
    assert export.manifest["counts"] == {"CV": {"YES": 1, "NO": 0}}
    archive = zipfile.ZipFile(io.BytesIO(export.archive.read()))
    trl_rows = [json.loads(line) for line in archive.read("trl.jsonl").decode().splitlines()]
    assert trl_rows[0]["curation_id"] == curation.pk
    assert all(path in archive.namelist() for path in trl_rows[0]["images"])
    assert json.loads(archive.read("sharegpt.json"))[0]["ground_truth"] == "YES"


def test_it_exports_reproducibly(curation, reviser, first_auditor, second_auditor):
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    standardized = curation_services.trajectory_from_stored(
        curation_selectors.head_version(curation).data
    )
    from agent.editing import standardize

    curation_services.curation_standardize(
        curation=curation, trajectory=standardize(standardized), standardizer={"name": "t"}
    )
    for user in (reviser, first_auditor, second_auditor):
        curation_services.vote_cast(curation=curation, user=user, value="accept")
    first = curation_datasets.dataset_export_create(actor=reviser)
    files_a, body_a = curation_datasets.dataset_files([curation])
    files_b, body_b = curation_datasets.dataset_files([curation])
    assert curation_datasets.zip_bytes(files_a) == curation_datasets.zip_bytes(files_b)
    assert body_a["content_hash"] == first.content_hash
    assert curation_datasets.dataset_export_create(actor=reviser).pk == first.pk
    assert DatasetExport.objects.count() == 1


def test_it_refuses_a_save_on_a_stale_version(curation, reviser, first_auditor):
    curation_services.curation_screen(curation=curation, user=first_auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    stale = curation.head_number
    revise(curation, reviser)
    base = curation_selectors.version_trajectory(curation_selectors.head_version(curation))
    with pytest.raises(core_errors.VersionConflict, match=f"based on version {stale}"):
        curation_services.curation_save_revision(
            curation=curation, user=reviser, base_number=stale, trajectory=base
        )
    assert curation.versions.count() == 2


def test_it_forbids_auditing_your_own_revision(curation, reviser, first_auditor):
    curation_services.curation_screen(curation=curation, user=first_auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    with pytest.raises(core_errors.NotAllowed, match="own revision"):
        curation_services.curation_claim_audit(curation=curation, user=reviser)


def test_it_gives_a_trajectory_only_two_auditors(
    curation, reviser, first_auditor, second_auditor, bystander
):
    to_audit(curation, reviser, first_auditor, second_auditor)
    with pytest.raises(core_errors.NotAllowed, match="two auditors"):
        curation_services.curation_claim_audit(curation=curation, user=bystander)


def test_it_lets_only_the_reviser_save(curation, reviser, first_auditor, bystander):
    curation_services.curation_screen(curation=curation, user=first_auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    with pytest.raises(core_errors.NotAllowed, match="only the reviser"):
        revise(curation, bystander)


def test_it_hides_the_other_verdict_until_both_are_in(
    curation, reviser, first_auditor, second_auditor
):
    to_audit(curation, reviser, first_auditor, second_auditor)
    curation_services.audit_submit(
        curation=curation,
        user=first_auditor,
        version_number=curation.head_number,
        verdict="approve",
    )
    assert curation_selectors.audits_visible_to(curation=curation, user=second_auditor) == []
    assert len(curation_selectors.audits_visible_to(curation=curation, user=first_auditor)) == 1
    curation_services.audit_submit(
        curation=curation,
        user=second_auditor,
        version_number=curation.head_number,
        verdict="approve",
    )
    assert len(curation_selectors.audits_visible_to(curation=curation, user=second_auditor)) == 2


def test_it_needs_a_comment_to_request_changes(curation, reviser, first_auditor, second_auditor):
    to_audit(curation, reviser, first_auditor, second_auditor)
    with pytest.raises(core_errors.WorkflowError, match="needs a comment"):
        curation_services.audit_submit(
            curation=curation,
            user=first_auditor,
            version_number=curation.head_number,
            verdict="request_changes",
        )


def test_it_counts_one_vote_per_voter_and_only_from_the_three(
    curation, reviser, first_auditor, second_auditor, bystander
):
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    trajectory = curation_services.trajectory_from_stored(
        curation_selectors.head_version(curation).data
    )
    curation_services.curation_standardize(
        curation=curation, trajectory=trajectory, standardizer={}
    )
    curation_services.vote_cast(curation=curation, user=reviser, value="accept")
    with pytest.raises(core_errors.WorkflowError, match="already voted"):
        curation_services.vote_cast(curation=curation, user=reviser, value="reject")
    with pytest.raises(core_errors.NotAllowed, match="only the reviser and the two auditors"):
        curation_services.vote_cast(curation=curation, user=bystander, value="accept")


def test_it_rejects_unless_unanimous_by_default(curation, reviser, first_auditor, second_auditor):
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    trajectory = curation_services.trajectory_from_stored(
        curation_selectors.head_version(curation).data
    )
    curation_services.curation_standardize(
        curation=curation, trajectory=trajectory, standardizer={}
    )
    for user, value in ((reviser, "accept"), (first_auditor, "accept"), (second_auditor, "reject")):
        curation_services.vote_cast(curation=curation, user=user, value=value)
    curation.refresh_from_db()
    assert curation.state == CurationState.REJECTED


def test_it_accepts_on_majority_when_configured(
    curation, reviser, first_auditor, second_auditor, settings
):
    settings.CURATION_ACCEPTANCE_RULE = "majority"
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    trajectory = curation_services.trajectory_from_stored(
        curation_selectors.head_version(curation).data
    )
    curation_services.curation_standardize(
        curation=curation, trajectory=trajectory, standardizer={}
    )
    for user, value in ((reviser, "accept"), (first_auditor, "reject"), (second_auditor, "accept")):
        curation_services.vote_cast(curation=curation, user=user, value=value)
    curation.refresh_from_db()
    assert curation.state == CurationState.ACCEPTED


def test_it_hides_votes_until_everyone_has_voted(curation, reviser, first_auditor, second_auditor):
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    trajectory = curation_services.trajectory_from_stored(
        curation_selectors.head_version(curation).data
    )
    curation_services.curation_standardize(
        curation=curation, trajectory=trajectory, standardizer={}
    )
    curation_services.vote_cast(curation=curation, user=reviser, value="accept")
    assert curation_selectors.votes_visible_to(curation=curation, user=first_auditor) == []
    curation_services.vote_cast(curation=curation, user=first_auditor, value="accept")
    curation_services.vote_cast(curation=curation, user=second_auditor, value="accept")
    assert len(curation_selectors.votes_visible_to(curation=curation, user=first_auditor)) == 3


def test_it_refuses_a_standardization_that_moves_a_tool_call(
    curation, reviser, first_auditor, second_auditor
):
    to_audit(curation, reviser, first_auditor, second_auditor)
    approve_both(curation, first_auditor, second_auditor)
    base = curation_services.trajectory_from_stored(curation_selectors.head_version(curation).data)
    _, answer = edit_from_trajectory(base)
    moved = apply_edit(
        base,
        tool=spectra_selectors.spectrum_tool(curation.spectrum),
        steps=[EditedStep("x", (6000.0, 7000.0), "wide")],
        answer=EditedAnswer(answer.think, answer.prediction, answer.justification),
    )
    with pytest.raises(core_errors.WorkflowError, match="changed tool actions"):
        curation_services.curation_standardize(curation=curation, trajectory=moved, standardizer={})
    curation.refresh_from_db()
    assert curation.state == CurationState.APPROVED


def test_it_lets_only_staff_reassign(curation, reviser, first_auditor, staff, outsider):
    curation_services.curation_screen(curation=curation, user=first_auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    with pytest.raises(core_errors.NotAllowed, match="only staff"):
        curation_services.curation_reassign(
            curation=curation, role="reviser", user=outsider, actor=reviser
        )
    curation_services.curation_reassign(
        curation=curation, role="reviser", user=outsider, actor=staff
    )
    curation.refresh_from_db()
    assert curation.reviser == outsider


def test_it_discards_with_a_reason_and_keeps_the_trajectory(curation, first_auditor):
    with pytest.raises(core_errors.WorkflowError, match="needs a reason"):
        curation_services.curation_screen(curation=curation, user=first_auditor, keep=False)
    curation_services.curation_screen(
        curation=curation, user=first_auditor, keep=False, reason="wrong window"
    )
    curation.refresh_from_db()
    assert curation.state == CurationState.DISCARDED
    assert curation.versions.count() == 1


def test_it_lists_my_work_by_stage(curation, reviser, first_auditor, second_auditor):
    queues = curation_selectors.curation_queues(user=reviser)
    assert list(queues["screening"]) == [curation]
    to_audit(curation, reviser, first_auditor, second_auditor)
    assert list(curation_selectors.curation_queues(user=first_auditor)["audit"]) == [curation]
    assert list(curation_selectors.curation_queues(user=reviser)["audit"]) == []
