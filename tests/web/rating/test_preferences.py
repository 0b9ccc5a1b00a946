"""DPO preference pairs from the loop (issue 25): pairwise judgements of closed campaigns (the
side most raters preferred is chosen, ties and even splits left out) and draft-versus-revision
pairs (the revision chosen), in TRL's vision DPO format with the images in the archive."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from annotation.core.errors import NotAllowed, WorkflowError
from annotation.curation import services as curation_services
from annotation.curation.models import ExportKind
from annotation.curation.selectors import trajectory_from_stored
from annotation.rating import preferences
from annotation.rating import services as rating_services
from annotation.rating.models import PairJudgement
from annotation.spectra.models import Task
from tests.factories import (
    UserFactory,
    answer_turn,
    make_revised_curation,
    make_spectrum,
    make_trajectory,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db

# Per spectrum, both raters' outcomes (by side): a win, two ties, an even split, a win and a tie.
OUTCOMES = [("left", "left"), ("tie", "tie"), ("left", "right"), ("right", "tie")]


def two_policy_sources(cv, spectra) -> list[rating_services.RatingSource]:
    """For each spectrum, a careful and a hasty trajectory: same prompt, different first turn."""
    turns = {
        "careful": [tool_call_turn(6500, 6630, "H-alpha", "Zoom on H-alpha first."), answer_turn()],
        "hasty": [answer_turn("NO", "Looks flat.")],
    }
    return [
        rating_services.RatingSource(
            source=f"test:{row.object_id}:{policy}",
            data=curation_services.trajectory_to_stored(make_trajectory(row, turns=list(script))),
            policy_name=policy,
            task=cv,
            spectrum=row,
            dataset="TEST",
        )
        for row in spectra
        for policy, script in turns.items()
    ]


def judged_campaign(raters, creator, spectra, outcomes, *, close: bool, name: str = "pairs"):
    cv = Task.objects.get(code="CV")
    campaign = rating_services.campaign_create(
        name=name,
        raters=raters,
        raters_per_item=1,
        sources=two_policy_sources(cv, spectra),
        created_by=creator,
        seed=5,
    )
    items = {item.source: item for item in campaign.items.all()}
    pairs = rating_services.campaign_add_pairs(
        campaign=campaign,
        pairs=[
            (items[f"test:{row.object_id}:careful"], items[f"test:{row.object_id}:hasty"])
            for row in spectra
        ],
        raters_per_pair=len(raters),
        actor=None,
    )
    for pair, wanted in zip(pairs, outcomes, strict=True):
        for rater, outcome in zip(raters, wanted, strict=True):
            judgement = PairJudgement.objects.get(pair=pair, rater=rater)
            rating_services.pair_judgement_submit(judgement=judgement, rater=rater, outcome=outcome)
    if close:
        rating_services.campaign_close(campaign=campaign, actor=creator)
    return campaign, pairs


@pytest.fixture
def raters(db):
    return [
        UserFactory(username="alice", roles=["rater"]),
        UserFactory(username="bob", roles=["rater"]),
    ]


@pytest.fixture
def closed_pairs(raters, staff, training_dirs):
    spectra = [make_spectrum(object_id=f"PAIR-{i}", seed=i) for i in range(len(OUTCOMES))]
    return judged_campaign(raters, staff, spectra, OUTCOMES, close=True)


@pytest.fixture
def revision(db, training_dirs):
    people = {
        "reviser": UserFactory(username="rev", roles=["expert"]),
        "auditors": [UserFactory(username="a1"), UserFactory(username="a2")],
    }
    return make_revised_curation(**people, object_id="REV-P", seed=42)


def read_export(export):
    bundle = zipfile.ZipFile(io.BytesIO(export.archive.open("rb").read()))
    return [json.loads(line) for line in bundle.read("dpo.jsonl").splitlines()], bundle


def first_turn(item) -> str:
    return trajectory_from_stored(item.data).steps[0].assistant_text


def test_it_makes_pairs_from_majorities_and_leaves_out_ties(closed_pairs, revision, ml_engineer):
    campaign, pairs = closed_pairs
    export = preferences.preference_export_create(actor=ml_engineer)
    assert (export.kind, export.version) == (ExportKind.PREFERENCE, 1)
    rows, bundle = read_export(export)
    judged = [row for row in rows if row["source"] == "pair_judgement"]
    # Pair 0: both said left; pair 3: right against a tie. Pairs 1 (ties) and 2 (split): none.
    assert [row["pair_id"] for row in judged] == [pairs[0].pk, pairs[3].pk]
    assert export.manifest["excluded"] == {"pair judged a tie or split evenly": 2}
    for row, pair, side in zip(judged, (pairs[0], pairs[3]), ("left", "right"), strict=True):
        chosen, rejected = (pair.left, pair.right) if side == "left" else (pair.right, pair.left)
        assert row["chosen"][0]["content"][0]["text"] == first_turn(chosen)
        assert row["rejected"][0]["content"][0]["text"] == first_turn(rejected)
        assert (row["chosen_item"], row["rejected_item"]) == (chosen.source, rejected.source)
        assert row["judgements"] == sorted(j.pk for j in pair.judgements.all())
        assert row["campaign_id"] == campaign.pk
    assert export.manifest["by_source"] == {"draft_revision": 1, "pair_judgement": 2}
    assert export.manifest["decisions"]["pair_judgements"] == sorted(
        pk for row in judged for pk in row["judgements"]
    )


def test_it_prefers_the_revision_over_the_draft(revision, ml_engineer):
    export = preferences.preference_export_create(actor=ml_engineer)
    rows, _ = read_export(export)
    assert len(rows) == 1
    row = rows[0]
    assert (row["source"], row["curation_id"]) == ("draft_revision", revision.pk)
    versions = {v.number: v for v in revision.versions.all()}
    assert row["chosen"][0]["content"][0]["text"] == first_turn(versions[2])
    assert row["rejected"][0]["content"][0]["text"] == first_turn(versions[1])
    assert (row["original_version"], row["revision_version"]) == (1, 2)
    assert export.curation_ids == [revision.pk]


def test_it_ships_the_images_in_the_archive_in_trl_dpo_shape(closed_pairs, ml_engineer):
    export = preferences.preference_export_create(actor=ml_engineer)
    rows, bundle = read_export(export)
    for row in rows:
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        placeholders = [p for m in row["prompt"] for p in m["content"] if p["type"] == "image"]
        assert len(placeholders) == len(row["images"]) == 1
        assert all("http" not in path for path in row["images"])
        assert bundle.read(row["images"][0])[:8] == b"\x89PNG\r\n\x1a\n"
        assert [m["role"] for m in row["chosen"] + row["rejected"]] == ["assistant", "assistant"]
    manifest = json.loads(bundle.read("manifest.json"))
    assert manifest["content_hash"] == export.content_hash and manifest["rows"] == len(rows)
    assert preferences.preference_export_create(actor=ml_engineer) == export


def test_it_names_each_rows_spectrum_for_the_dpo_checkpoints_training_spectra(
    closed_pairs, revision, ml_engineer
):
    """training.dpo records these beside its checkpoint, so evaluations refuse them."""
    _, pairs = closed_pairs
    rows, _ = read_export(preferences.preference_export_create(actor=ml_engineer))
    by_pair = {pair.pk: pair for pair in pairs}
    for row in rows:
        spectrum = (
            revision.spectrum
            if row["source"] == "draft_revision"
            else by_pair[row["pair_id"]].left.spectrum
        )
        assert row["spectrum_object_id"] == spectrum.object_id
        assert row["spectrum_content_hash"] == spectrum.content_hash


def test_it_leaves_open_campaigns_out(raters, staff, ml_engineer, training_dirs):
    spectra = [make_spectrum(object_id="OPEN-0", seed=9)]
    judged_campaign(raters, staff, spectra, [("left", "left")], close=False)
    with pytest.raises(WorkflowError, match="no preference pair to export yet"):
        preferences.preference_export_create(actor=ml_engineer)


def test_it_refuses_an_export_showing_what_the_actor_may_not_read(closed_pairs, ml_engineer):
    _, pairs = closed_pairs
    spectrum_hash = pairs[0].left.spectrum.content_hash
    with pytest.raises(NotAllowed, match="open campaign"):
        preferences.preference_export_create(
            actor=ml_engineer, hidden_hashes=frozenset({spectrum_hash})
        )
