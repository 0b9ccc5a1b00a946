"""SFT rows from expert-revised trajectories (issue 25): the latest revision that passed audit,
versioned and hashed, each row naming the draft it corrected, the revision and the audits."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.models import AuditLog
from annotation.curation import datasets, revised
from annotation.curation.models import (
    Audit,
    Curation,
    CurationState,
    ExportKind,
    TrajectoryVersion,
    VersionKind,
)
from annotation.curation.selectors import trajectory_from_stored
from tests.factories import UserFactory, make_curation, make_revised_curation

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db):
    return {
        "reviser": UserFactory(username="rev", roles=["expert"]),
        "auditors": [
            UserFactory(username="aud1", roles=["expert"]),
            UserFactory(username="aud2", roles=["expert"]),
        ],
    }


@pytest.fixture
def revised_curation(people, training_dirs):
    return make_revised_curation(**people, object_id="REV-A")


def archive_rows(export) -> tuple[list[dict], zipfile.ZipFile]:
    bundle = zipfile.ZipFile(io.BytesIO(export.archive.open("rb").read()))
    rows = [json.loads(line) for line in bundle.read("trl.jsonl").splitlines()]
    return rows, bundle


def test_it_exports_the_revision_with_what_it_came_from(revised_curation, people, owner):
    untouched = make_curation(object_id="DRAFT-ONLY", seed=3)  # never revised: no row
    export = revised.revised_export_create(actor=owner)
    assert export.kind == ExportKind.REVISED and export.version == 1
    rows, bundle = archive_rows(export)
    assert [row["curation_id"] for row in rows] == [revised_curation.pk] != [untouched.pk]
    row = rows[0]
    revision = TrajectoryVersion.objects.get(curation=revised_curation, kind=VersionKind.REVISION)
    assert row["version"] == revision.number == 2
    audits = sorted(Audit.objects.filter(curation=revised_curation).values_list("pk", flat=True))
    assert row["provenance"] == {
        "curation_id": revised_curation.pk,
        "original_version": 1,
        "original_kind": "draft",
        "revision_version": 2,
        "revised_by": people["reviser"].pk,
        "audits": audits,
    }
    # The row holds the expert's own text, not the draft's.
    expert_turn = trajectory_from_stored(revision.data).steps[0].assistant_text
    assert row["messages"][2]["content"][0]["text"] == expert_turn
    assert "Zoom on the core." in expert_turn
    for path in row["images"]:
        assert bundle.read(path)[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(bundle.read("sharegpt.json"))[0]["sample_index"] == revised_curation.pk
    manifest = json.loads(bundle.read("manifest.json"))
    assert manifest["decisions"] == {"revisions": [[revised_curation.pk, 2]], "audits": audits}
    assert (
        manifest["content_hash"]
        == export.content_hash
        == datasets.files_digest(
            {name: bundle.read(name) for name in bundle.namelist() if name != "manifest.json"}
        )[0]
    )
    assert export.curation_ids == [revised_curation.pk]
    assert export.content_hashes == [revised_curation.spectrum.content_hash]
    assert AuditLog.objects.filter(action="revised_export_created").count() == 1


def test_it_versions_revised_exports_apart_from_accepted_ones(revised_curation, people, owner):
    first = revised.revised_export_create(actor=owner)
    assert revised.revised_export_create(actor=owner) == first  # same content, same version
    Curation.objects.filter(pk=revised_curation.pk).update(state=CurationState.ACCEPTED)
    accepted = datasets.dataset_export_create(actor=owner)
    assert (accepted.kind, accepted.version) == (ExportKind.ACCEPTED, 1)
    make_revised_curation(**people, object_id="REV-B", seed=5)
    second = revised.revised_export_create(actor=owner)
    assert second.version == 2 and second.manifest["rows"] == 2


def test_it_leaves_out_revisions_not_approved_and_rejected_curations(people, owner, training_dirs):
    curation = make_revised_curation(**people, object_id="REV-R")
    Curation.objects.filter(pk=curation.pk).update(state=CurationState.REJECTED)
    with pytest.raises(WorkflowError, match="no expert-revised trajectory"):
        revised.revised_export_create(actor=owner)
    Curation.objects.filter(pk=curation.pk).update(state=CurationState.IN_AUDIT)
    with pytest.raises(WorkflowError, match="no expert-revised trajectory"):
        revised.revised_export_create(actor=owner)


def test_it_refuses_an_export_holding_what_the_actor_may_not_read(revised_curation, owner):
    with pytest.raises(NotAllowed, match="open campaign"):
        revised.revised_export_create(
            actor=owner, hidden_curations=frozenset({revised_curation.pk})
        )
    with pytest.raises(NotAllowed, match="open campaign"):
        revised.revised_export_create(
            actor=owner, hidden_hashes=frozenset({revised_curation.spectrum.content_hash})
        )
