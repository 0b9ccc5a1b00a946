"""Model lineage: every catalog entry names its model; a new model's verdicts are compared with
an earlier one's on the same spectra (vetted labels as truth); staff promote a model to current;
the catalog shows the current model's verdicts or an earlier one's."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agent.policies.base import code_version
from annotation.catalog import comparisons
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.models import AuditLog
from annotation.inspections import lineage, promotions, services
from annotation.inspections.models import CatalogEntry, InspectionRun, ModelPromotion
from annotation.spectra.models import Task
from tests.factories import make_endpoint, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

# Per spectrum: vetted label, old model's (verdict, confidence), new model's.
CASES = {
    "CMP-fixed": ("YES", ("NO", 0.9), ("YES", 0.9)),
    "CMP-broken": ("NO", ("NO", 0.9), ("YES", 0.9)),
    "CMP-same": ("YES", ("YES", 0.9), ("YES", 0.95)),
    "CMP-flip-unlabelled": ("", ("NO", 0.9), ("YES", 0.9)),
    "CMP-uncertain": ("NO", ("NO", 0.9), ("NO", 0.5)),
}


@pytest.fixture
def world(owner, expert, outsider):
    spectra = {name: make_spectrum(object_id=name, seed=i) for i, name in enumerate(CASES)}
    old = make_inspected(
        spectra=list(spectra.values()),
        verdicts={row.pk: CASES[name][1] for name, row in spectra.items()},
        created_by=owner,
        model=("rule-based@v1", "rule-based v1"),
    )
    for name, row in spectra.items():
        label = CASES[name][0]
        if label:
            candidate = old.candidates.get(spectrum=row)
            for user in (expert, outsider):
                services.expert_decision_record(candidate=candidate, expert=user, decision=label)
    new = make_inspected(
        spectra=list(spectra.values()),
        verdicts={row.pk: CASES[name][2] for name, row in spectra.items()},
        created_by=owner,
        model=("checkpoint:abc123", "checkpoint tiny · abc123"),
    )
    return {"spectra": spectra, "old": old, "new": new}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_names_the_model_of_each_run_without_an_endpoint_url(owner, settings):
    make_endpoint(name="gpu-1", base_url="http://10.0.0.9:8000/v1", model="qwen-vl")
    row = make_spectrum(object_id="LIN-1")
    run = services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[row.pk],
        policy_spec={"kind": "openai", "endpoint": "gpu-1"},
        created_by=owner,
        enqueue=False,
    )
    assert (run.model_key, run.model_label) == (
        "endpoint:gpu-1/qwen-vl",
        "endpoint gpu-1 · qwen-vl",
    )
    assert "10.0.0.9" not in run.model_key + run.model_label
    rule = make_inspected(spectra=[row], verdicts={row.pk: ("NO", 0.9)})
    assert rule.model_key == f"rule-based@{code_version()[:80]}"
    entry = CatalogEntry.objects.get(run=rule)
    assert (entry.model_key, entry.model_label) == (rule.model_key, rule.model_label)


def test_it_keys_a_checkpoint_by_the_hash_of_its_weights(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, weights in ((first, b"w1"), (second, b"w2")):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(weights)
        (folder / "config.json").write_text("{}")
    digest = lineage.weights_sha256(first)
    assert digest != lineage.weights_sha256(second)
    key, label = lineage.model_identity(
        {"kind": "transformers", "model_path": str(first)}, {"weights_sha256": digest}
    )
    assert key == f"checkpoint:{digest}" and label == f"checkpoint a · {digest[:12]}"
    # The same weights in another folder are the same model.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "model.safetensors").write_bytes(b"w1")
    assert lineage.weights_sha256(copy) == digest


def test_it_compares_a_new_model_with_an_earlier_one_spectrum_by_spectrum(world, owner):
    comparison = comparisons.compare_models(
        entries=CatalogEntry.objects.all(),
        task="CV",
        old_key="rule-based@v1",
        new_key="checkpoint:abc123",
    )
    outcomes = {row.object_id: row.outcome for row in comparison.rows}
    assert outcomes == {
        "CMP-fixed": "fixed",
        "CMP-broken": "broken",
        "CMP-flip-unlabelled": "flipped",
        "CMP-uncertain": "unchanged",
    }
    assert {row.object_id for row in comparison.rows if row.newly_uncertain} == {"CMP-uncertain"}
    assert comparison.as_dict() | {} == {
        "task": "CV",
        "old_key": "rule-based@v1",
        "new_key": "checkpoint:abc123",
        "shared": 5,
        "flipped": 3,
        "fixed": 1,
        "broken": 1,
        "newly_uncertain": 1,
        "labelled": 4,
        "old_correct": 3,
        "new_correct": 3,
    }
    # Each row carries its own spectrum's verdicts and label.
    for row in comparison.rows:
        label, old, new = CASES[row.object_id]
        assert (row.label, row.old.verdict, row.new.verdict) == (label, old[0], new[0])


def test_it_shows_the_comparison_page_and_refuses_an_unknown_model(world, expert_client):
    page = expert_client.get(reverse("catalog_compare"), {"task": "CV", "new": "checkpoint:abc123"})
    assert page.status_code == 200
    assert page.context["old"] == "rule-based@v1"  # the newest other model: none is current
    body = page.content.decode()
    assert 'id="count-fixed">1<' in body and 'id="count-broken">1<' in body
    assert "promote-form" not in body  # experts do not promote
    bad = expert_client.get(reverse("catalog_compare"), {"task": "CV", "new": "nope"})
    assert bad.status_code == 400 and "new: no model with key" in bad.content.decode()


def test_it_lets_staff_promote_a_model_logs_it_and_filters_the_catalog_by_it(world, staff, expert):
    staff_client = client_for(staff)
    page = staff_client.get(reverse("catalog_compare"), {"task": "CV"})
    assert "promote-form" in page.content.decode()
    response = staff_client.post(
        reverse("model_promote"),
        {"task": "CV", "model_key": "checkpoint:abc123", "comment": "fixes more than it breaks"},
    )
    assert response.status_code == 302
    promotion = ModelPromotion.objects.get()
    assert (promotion.model_key, promotion.promoted_by, promotion.run) == (
        "checkpoint:abc123",
        staff,
        world["new"],
    )
    logged = AuditLog.objects.get(action="model_promoted")
    assert logged.actor == staff and logged.data["model_key"] == "checkpoint:abc123"
    expert_client = client_for(expert)
    current = expert_client.get(reverse("catalog_list"), {"model": "current"})
    assert {row.model_key for row in current.context["rows"]} == {"checkpoint:abc123"}
    assert len(current.context["rows"]) == 5
    earlier = expert_client.get(reverse("catalog_list"), {"model": "rule-based@v1"})
    assert {row.run_id for row in earlier.context["rows"]} == {world["old"].pk}
    # The comparison's default baseline is now the current model.
    assert (
        client_for(staff)
        .get(reverse("catalog_compare"), {"task": "CV", "new": "rule-based@v1"})
        .context["old"]
        == "checkpoint:abc123"
    )


def test_it_refuses_a_promotion_by_a_non_staff_user_or_of_a_model_that_never_ran(
    world, expert, staff, expert_client
):
    assert (
        expert_client.post(
            reverse("model_promote"), {"task": "CV", "model_key": "checkpoint:abc123"}
        ).status_code
        == 403
    )
    with pytest.raises(NotAllowed):
        promotions.model_promote(
            task=Task.objects.get(code="CV"), model_key="checkpoint:abc123", actor=expert
        )
    with pytest.raises(WorkflowError, match="no inspection run on task MG"):
        promotions.model_promote(
            task=Task.objects.get(code="MG"), model_key="checkpoint:abc123", actor=staff
        )
    assert not ModelPromotion.objects.exists()


def test_it_hides_a_blinded_run_from_the_comparison_of_a_rater_in_an_open_campaign(world, expert):
    from annotation.rating.models import CampaignItem, RatingCampaign

    new = world["new"]
    rollout = new.candidates.first()
    # An open campaign rating an item of the new run, with the expert among its raters.
    campaign = RatingCampaign.objects.create(name="open", created_by=expert)
    campaign.raters.add(expert)
    from annotation.inspections.models import Rollout

    item_rollout = Rollout.objects.filter(candidate=rollout).first() or Rollout.objects.create(
        candidate=rollout, index=0, data={}, prediction="YES"
    )
    CampaignItem.objects.create(
        campaign=campaign,
        blind_id="b1",
        data={},
        policy_name="hidden",
        source=f"rollout:{item_rollout.pk}",
        task=new.task,
        spectrum=rollout.spectrum,
    )
    page = client_for(expert).get(
        reverse("catalog_compare"), {"task": "CV", "new": "checkpoint:abc123"}
    )
    assert page.status_code == 400  # the new run is hidden: its model is unknown to them
    assert InspectionRun.objects.filter(model_key="checkpoint:abc123").exists()
