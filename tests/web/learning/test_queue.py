"""The active vetting queue: conflicts first, then the decision worth most (uncertain verdicts,
disagreement between models, classes with few labels); gold items mixed in at a falling rate,
looking like any other item, their answers making no label."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.catalog import selectors as catalog
from annotation.catalog.queue import vetter_queue_rows
from annotation.inspections import services as inspection_services
from annotation.inspections.models import ExpertDecision
from annotation.learning import queue, services
from annotation.learning.models import GoldAnswer
from annotation.spectra.models import SpectrumLabel
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def vetter(db):
    return UserFactory(username="vera", roles=["expert"])


SEEDS = iter(range(1000, 100000))  # one spectrum per name: equal seeds would be one spectrum


def routed(verdicts: dict[str, tuple[str, float]], *, owner, model=("model:a", "model a")):
    """Every candidate routed to experts (threshold 0.999)."""
    spectra = {name: make_spectrum(object_id=f"Q-{name}", seed=next(SEEDS)) for name in verdicts}
    run = make_inspected(
        spectra=list(spectra.values()),
        verdicts={row.pk: verdicts[name] for name, row in spectra.items()},
        created_by=owner,
        threshold=0.999,
        model=model,
    )
    return spectra, {name: run.candidates.get(spectrum=row) for name, row in spectra.items()}


def order(user) -> list[str]:
    rows = vetter_queue_rows(user)
    names = {c.pk: c.spectrum.object_id.removeprefix("Q-") for c in rows}
    return [names[r.pk] for r in queue.ranked(rows)]


def test_it_puts_conflicts_first_then_disagreement_and_uncertainty(owner, expert, outsider, vetter):
    spectra, candidates = routed(
        {
            "sure-yes": ("YES", 0.95),
            "unsure-yes": ("YES", 0.55),
            "sure-no": ("NO", 0.9),
            "disputed": ("YES", 0.95),
            "conflict": ("YES", 0.95),
        },
        owner=owner,
    )
    # Another model answered "disputed" NO, confidently enough not to be routed itself.
    make_inspected(
        spectra=[spectra["disputed"]],
        verdicts={spectra["disputed"].pk: ("NO", 0.99)},
        created_by=owner,
        threshold=0.0,
        model=("model:b", "model b"),
    )
    inspection_services.expert_decision_record(
        candidate=candidates["conflict"], expert=expert, decision="YES"
    )
    inspection_services.expert_decision_record(
        candidate=candidates["conflict"], expert=outsider, decision="NO"
    )
    assert order(vetter) == ["conflict", "disputed", "unsure-yes", "sure-no", "sure-yes"]
    # The catalog's own order (conflicts, then the oldest) differs: the ordering is new.
    assert [
        c.spectrum.object_id.removeprefix("Q-") for c in catalog.vetting_queue(vetter)
    ] != order(vetter)


def test_it_prefers_the_class_with_fewer_labels(owner, expert, outsider, vetter):
    _, candidates = routed(
        {"yes": ("YES", 0.8), "no": ("NO", 0.8)} | {f"labelled{i}": ("YES", 0.8) for i in range(5)},
        owner=owner,
    )
    for i in range(5):
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidates[f"labelled{i}"], expert=user, decision="YES"
            )
    assert order(vetter)[:2] == ["no", "yes"]  # equally uncertain; NO has no label yet


def test_it_orders_by_the_recalibrated_confidence(owner, expert, outsider, vetter, staff):
    """A model sure at 0.95 but right half the time: after recalibration its 0.95 answers are
    the uncertain ones, ahead of a 0.7 answer of another model."""
    _, candidates = routed(
        {f"L{i}": ("YES", 0.95) for i in range(10)} | {"over": ("YES", 0.95)}, owner=owner
    )
    routed({"other": ("YES", 0.75)}, owner=owner, model=("model:c", "model c"))
    for i in range(10):
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidates[f"L{i}"], expert=user, decision="YES" if i % 2 else "NO"
            )
    assert order(vetter) == ["other", "over"]
    services.recalibrate_task(
        task=candidates["over"].run.task, model_key="model:a", actor=staff, job=None
    )
    assert order(vetter) == ["over", "other"]


def test_it_adds_open_audit_samples_to_the_queue(owner, vetter, staff):
    _, candidates = routed({"x": ("YES", 0.9)}, owner=owner)
    spectra = {"auto": make_spectrum(object_id="Q-auto", seed=next(SEEDS))}
    make_inspected(
        spectra=list(spectra.values()),
        verdicts={spectra["auto"].pk: ("YES", 0.99)},
        created_by=owner,
        threshold=0.5,
        model=("model:a", "model a"),
    )
    assert order(vetter) == ["x"]
    sample = services.audit_sample_draw(
        task=candidates["x"].run.task, model_key="model:a", per_stratum=5, actor=staff
    )
    assert sorted(order(vetter)) == ["auto", "x"]
    services.audit_sample_close(sample=sample, actor=staff)
    assert order(vetter) == ["x"]


@pytest.fixture
def with_gold(owner, expert, outsider, staff):
    """A routed candidate waiting, and ten gold items labelled by expert and outsider."""
    _, waiting = routed({"waiting": ("YES", 0.6)}, owner=owner)
    _, golden = routed({f"known{i}": ("YES", 0.9) for i in range(10)}, owner=owner)
    for candidate in golden.values():
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidate, expert=user, decision="YES"
            )
        services.gold_item_mark(candidate=candidate, actor=staff)
    return waiting["waiting"], golden


def test_it_mixes_gold_in_at_a_rate_falling_with_the_record(with_gold, vetter, monkeypatch):
    waiting, golden = with_gold
    gold_ids = {c.pk for c in golden.values()}
    rows = vetter_queue_rows(vetter)
    gold = queue.gold_candidates(vetter)
    # Nothing is written while the 440 choices are drawn, so the queue's ranking is the same
    # for each: ranked once (its own tests are above), not 440 times over (4 queries each).
    ranking = queue.ranked(rows)
    monkeypatch.setattr(queue, "ranked", lambda ranked_rows, **kwargs: ranking)

    def share(records: range) -> float:
        served = 0
        for record in records:
            monkeypatch.setattr(queue, "items_vetted", lambda user, n=record: n)
            chosen = queue.next_candidate(user=vetter, queue=rows, gold=gold, skipped=[])
            served += chosen.pk in gold_ids
        return served / len(records)

    newcomer, veteran = share(range(0, 40)), share(range(400, 800))
    assert 0.05 <= newcomer <= 0.35
    assert veteran <= 0.06
    assert newcomer > veteran


def test_it_shows_no_gold_to_who_labelled_it_nor_when_nothing_waits(with_gold, expert, vetter):
    waiting, _ = with_gold
    assert not queue.gold_candidates(expert).exists()
    assert queue.gold_candidates(vetter).count() == 10
    empty = vetter_queue_rows(vetter).none()
    assert (
        queue.next_candidate(
            user=vetter, queue=empty, gold=queue.gold_candidates(vetter), skipped=[]
        )
        is None
    )


def test_it_records_a_gold_answer_from_the_page_without_telling_the_vetter(with_gold, vetter):
    waiting, golden = with_gold
    gold_candidate = golden["known3"]
    client = Client()
    client.force_login(vetter)
    gold_page = client.get(
        f"{reverse('vetting_queue')}?candidate={gold_candidate.pk}"
    ).content.decode()
    plain_page = client.get(f"{reverse('vetting_queue')}?candidate={waiting.pk}").content.decode()
    assert "gold" not in gold_page.lower() and "agreed" not in gold_page.lower()
    assert gold_page.count("<form") == plain_page.count("<form")
    label_before = SpectrumLabel.objects.get(spectrum_id=gold_candidate.spectrum_id)
    response = client.post(
        reverse("vetting_decide"), {"candidate": gold_candidate.pk, "decision": "NO"}, follow=True
    )
    assert f"Recorded NO for {gold_candidate.spectrum.object_id}" in response.content.decode()
    answer = GoldAnswer.objects.get(vetter=vetter)
    assert (answer.answer, answer.correct) == ("NO", False)
    assert not ExpertDecision.objects.filter(expert=vetter).exists()
    label_after = SpectrumLabel.objects.get(spectrum_id=gold_candidate.spectrum_id)
    assert label_after.decisions == label_before.decisions
    client.post(reverse("vetting_undo"), {"candidate": gold_candidate.pk})
    assert not GoldAnswer.objects.filter(vetter=vetter).exists()


def test_it_answers_a_gold_decision_through_the_api_like_any_decision(with_gold, vetter):
    waiting, golden = with_gold
    client = APIClient()
    client.force_authenticate(vetter)
    url = reverse("api_expert_decision_create")
    gold = client.post(url, {"candidate": golden["known1"].pk, "decision": "YES"}, format="json")
    plain = client.post(url, {"candidate": waiting.pk, "decision": "YES"}, format="json")
    assert gold.status_code == plain.status_code == 201
    assert set(gold.json()) == set(plain.json())
    assert GoldAnswer.objects.get(vetter=vetter).correct is True
    assert ExpertDecision.objects.filter(expert=vetter).count() == 1
    nxt = client.get(reverse("api_vetting_next"))
    assert nxt.status_code == 200 and nxt.json()["remaining"] == 0
