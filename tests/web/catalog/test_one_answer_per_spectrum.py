"""One answer per expert per spectrum and task, however many runs inspected the spectrum
(issue 32): the queue serves it once, a later answer replaces the earlier one visibly, and the
entry, its API twin, the list and the gold page tell the same story."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from annotation.catalog.queue import vetter_queue
from annotation.core import errors as core_errors
from annotation.core.models import AuditLog
from annotation.home import pending_work
from annotation.inspections import queue_actions, services
from annotation.inspections.models import CatalogEntry, ExpertDecision
from annotation.learning import queue as active_queue
from annotation.learning import services as learning_services
from annotation.spectra.models import SpectrumLabel
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

RUNS = 3


@pytest.fixture
def spectra(db) -> list[Any]:
    return [make_spectrum(object_id=f"ONCE-{i}", seed=i) for i in range(2)]


@pytest.fixture
def runs(spectra, owner) -> list[Any]:
    # below the confidence threshold: every run routes every spectrum to the experts
    verdicts = {row.pk: ("YES", 0.55) for row in spectra}
    return [
        make_inspected(
            spectra=spectra, verdicts=verdicts, created_by=owner, model=(f"m:{n}", f"M{n}")
        )
        for n in range(RUNS)
    ]


def candidate_of(run: Any, spectrum: Any) -> Any:
    return run.candidates.select_related("spectrum", "run__task").get(spectrum=spectrum)


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def decide(client: Client, candidate: Any, decision: str) -> Any:
    return client.post(
        reverse("vetting_decide"), {"candidate": candidate.pk, "decision": decision}, follow=True
    )


def test_it_serves_a_spectrum_and_task_once_per_expert_whatever_the_number_of_runs(
    runs, spectra, expert
):
    assert vetter_queue(expert).count() == len(spectra)
    assert len({c.spectrum_id for c in vetter_queue(expert)}) == len(spectra)
    client = client_for(expert)
    assert client.get(reverse("api_vetting_next")).json()["remaining"] == len(spectra)
    home = {row["text"]: row["count"] for row in pending_work(expert)}
    assert home["candidates waiting for your vetting"] == len(spectra)

    # Walk the queue as a new user would: each spectrum comes once, then the queue is empty.
    served = []
    for _ in range(len(spectra) * RUNS):
        page = client.get(reverse("vetting_queue"))
        candidate = page.context["candidate"]
        if candidate is None:
            break
        served.append(candidate.spectrum_id)
        decide(client, candidate, "NO")
    assert sorted(served) == sorted(row.pk for row in spectra)
    assert ExpertDecision.objects.filter(expert=expert).count() == len(spectra)
    assert client.get(reverse("vetting_queue")).context["remaining"] == 0


def test_it_lets_a_later_answer_on_another_runs_candidate_replace_the_earlier_one_visibly(
    runs, spectra, expert, outsider
):
    spectrum = spectra[0]
    first, second, third = (candidate_of(run, spectrum) for run in runs)
    client = client_for(expert)
    decide(client, first, "NO")
    response = decide(client, second, "YES")
    shown = [str(message) for message in get_messages(response.wsgi_request)]
    assert any(f"replaces your earlier answer, NO (run {runs[0].pk})" in text for text in shown)
    services.expert_decision_record(candidate=third, expert=outsider, decision="YES")

    label = SpectrumLabel.objects.get(spectrum=spectrum)
    assert (label.state, label.value) == ("agreed", "YES")
    # every run's entry of the spectrum: the experts' latest answers agree, and so does the label
    entries = CatalogEntry.objects.filter(spectrum=spectrum).order_by("run_id")
    assert [(e.expert_decision, e.vetted_label, e.label_state) for e in entries] == [
        ("YES", "YES", "agreed")
    ] * RUNS

    no = ExpertDecision.objects.get(candidate=first, expert=expert)
    yes = ExpertDecision.objects.get(candidate=second, expert=expert)
    entry = entries.get(run=runs[0])
    page = client.get(reverse("catalog_detail", args=[entry.pk]))
    rows = page.context["decisions"]
    assert [(r.decision.pk, r.current) for r in rows] == [
        (no.pk, False),
        (yes.pk, True),
        (ExpertDecision.objects.get(expert=outsider).pk, True),
    ]
    assert rows[0].replaced_by == yes
    html = page.content.decode()
    assert "decision-replaced" in html and "replaced by YES" in html
    assert [(d["expert"], d["value"]) for d in page.context["label_decisions"]] == [
        ("payne", "YES"),
        ("outsider", "YES"),
    ]
    detail = client.get(reverse("api_catalog_detail", args=[entry.pk])).json()
    assert [(d["id"], d["run"], d["replaced_by"]) for d in detail["expert_decisions"]] == [
        (no.pk, runs[0].pk, yes.pk),
        (yes.pk, runs[1].pk, None),
        (ExpertDecision.objects.get(expert=outsider).pk, runs[2].pk, None),
    ]
    assert detail["expert_decision"] == "YES"
    logged = AuditLog.objects.filter(action="expert_decision", actor=expert).order_by("id").last()
    assert logged is not None
    assert (logged.from_state, logged.to_state, logged.data["replaces"]) == ("NO", "YES", no.pk)


def test_it_answers_200_through_the_api_when_an_answer_replaces_one_on_another_run(
    runs, spectra, expert
):
    client = client_for(expert)
    url = reverse("api_expert_decision_create")
    first, second = candidate_of(runs[0], spectra[0]), candidate_of(runs[1], spectra[0])
    made = client.post(
        url, {"candidate": first.pk, "decision": "NO"}, content_type="application/json"
    )
    assert made.status_code == 201 and made.json()["replaced_by"] is None
    changed = client.post(
        url, {"candidate": second.pk, "decision": "YES"}, content_type="application/json"
    )
    assert changed.status_code == 200
    assert changed.json()["run"] == runs[1].pk


def test_it_tallies_each_experts_latest_answer_once_in_the_catalog_list(
    runs, spectra, expert, outsider
):
    spectrum = spectra[0]
    services.expert_decision_record(
        candidate=candidate_of(runs[0], spectrum), expert=expert, decision="NO"
    )
    services.expert_decision_record(
        candidate=candidate_of(runs[1], spectrum), expert=expert, decision="YES"
    )
    services.expert_decision_record(
        candidate=candidate_of(runs[2], spectrum), expert=outsider, decision="NO"
    )
    listed = client_for(expert).get(reverse("catalog_list"), {"expert_decision": "split"})
    rows = listed.context["rows"]
    assert len(rows) == RUNS
    assert {(row.expert_decision, row.expert_tally) for row in rows} == {("split", "YES 1 · NO 1")}
    assert SpectrumLabel.objects.get(spectrum=spectrum).state == "conflict"


def test_it_makes_the_earlier_answer_current_again_when_the_later_is_undone(
    runs, spectra, expert, outsider
):
    spectrum = spectra[0]
    first, second = candidate_of(runs[0], spectrum), candidate_of(runs[1], spectrum)
    client = client_for(expert)
    decide(client, first, "NO")
    decide(client, second, "YES")
    services.expert_decision_record(
        candidate=candidate_of(runs[2], spectrum), expert=outsider, decision="NO"
    )
    assert SpectrumLabel.objects.get(spectrum=spectrum).state == "conflict"
    client.post(reverse("vetting_undo"), {"candidate": second.pk})
    label = SpectrumLabel.objects.get(spectrum=spectrum)
    assert (label.state, label.value) == ("agreed", "NO")
    assert set(
        CatalogEntry.objects.filter(spectrum=spectrum).values_list("expert_decision", flat=True)
    ) == {"NO"}


@pytest.fixture
def labelled(runs, spectra, expert, outsider) -> Any:
    """spectra[0] labelled YES by two experts answering on different runs' candidates."""
    services.expert_decision_record(
        candidate=candidate_of(runs[0], spectra[0]), expert=expert, decision="YES"
    )
    services.expert_decision_record(
        candidate=candidate_of(runs[1], spectra[0]), expert=outsider, decision="YES"
    )
    return spectra[0]


def test_it_lists_each_labelled_spectrum_once_on_the_gold_page(runs, labelled, staff):
    client = client_for(staff)
    eligible = client.get(reverse("gold")).context["eligible"]
    assert [(e.spectrum_id, e.task_code) for e in eligible] == [(labelled.pk, "CV")]
    client.post(reverse("gold_mark"), {"entry": eligible[0].pk})
    assert client.get(reverse("gold")).context["eligible"] == []
    with pytest.raises(core_errors.WrongState, match="gold item for the task already"):
        learning_services.gold_item_mark(
            candidate=candidate_of(runs[0], labelled)
            if eligible[0].run_id != runs[0].pk
            else candidate_of(runs[1], labelled),
            actor=staff,
        )


def test_it_never_tests_an_expert_on_a_spectrum_they_answered_on_another_run(
    runs, labelled, expert, staff
):
    gold = learning_services.gold_item_mark(candidate=candidate_of(runs[2], labelled), actor=staff)
    newcomer = UserFactory(username="newcomer", roles=["expert"])
    assert list(active_queue.gold_candidates(newcomer)) == [gold.candidate]
    # the expert answered the spectrum on run 0: on run 2's candidate theirs is a decision
    assert learning_services.gold_for_vetter(candidate=gold.candidate, vetter=expert) is None
    assert learning_services.gold_for_vetter(candidate=gold.candidate, vetter=newcomer) == gold


def test_it_says_on_the_vetting_page_when_the_same_content_is_stored_twice(owner, expert):
    original = make_spectrum(object_id="TWIN", seed=7, dataset="lamost")
    copy = make_spectrum(object_id="TWIN", seed=7, dataset="uploads")
    assert original.pk != copy.pk and original.content_hash == copy.content_hash
    run = make_inspected(
        spectra=[original, copy],
        verdicts={original.pk: ("YES", 0.55), copy.pk: ("YES", 0.55)},
        created_by=owner,
    )
    services.expert_decision_record(
        candidate=candidate_of(run, original), expert=expert, decision="NO"
    )
    page = client_for(expert).get(reverse("vetting_queue"))
    assert page.context["candidate"].spectrum_id == copy.pk
    html = page.content.decode()
    assert "same-content" in html
    assert f"spectrum {original.pk}</a> in lamost (you answered NO)" in html


def test_it_starts_a_later_runs_entry_with_the_experts_answers_on_its_spectrum(
    runs, labelled, owner
):
    later = make_inspected(
        spectra=[labelled],
        verdicts={labelled.pk: ("NO", 0.9)},
        created_by=owner,
        model=("m:9", "M9"),
    )
    entry = CatalogEntry.objects.get(run=later)
    assert (entry.expert_decision, entry.vetted_label, entry.label_state) == (
        "YES",
        "YES",
        "agreed",
    )


def test_it_refuses_to_assign_an_expert_a_spectrum_they_answered_on_another_run(
    runs, spectra, expert, staff
):
    services.expert_decision_record(
        candidate=candidate_of(runs[0], spectra[0]), expert=expert, decision="NO"
    )
    other = candidate_of(runs[1], spectra[0])
    with pytest.raises(core_errors.WorkflowError, match=f"candidates {other.pk} already"):
        queue_actions.candidates_reassign(candidate_ids=[other.pk], expert=expert, actor=staff)


def test_it_counts_what_blinding_hides_as_the_queue_counts_spectra_and_tasks(runs, spectra, expert):
    from annotation.catalog.queue import vetter_queue_hidden
    from annotation.inspections.models import Rollout
    from annotation.rating.models import CampaignItem, RatingCampaign
    from annotation.spectra.models import Task

    def shown_in_open_campaign(name: str, candidate: Any, source: str) -> None:
        row = RatingCampaign.objects.create(name=name)
        row.raters.set([expert])
        CampaignItem.objects.create(
            campaign=row,
            blind_id=f"B-{name}",
            data={},
            policy_name="rule-based",
            source=source,
            task=Task.objects.get(code="CV"),
            spectrum=candidate.spectrum,
        )

    # a rollout of run 0 hides run 0 and its spectrum's content: spectra[0] still waits through
    # the other runs (nothing of it is hidden), spectra[1] is hidden once, not three times
    hidden_run = candidate_of(runs[0], spectra[1])
    rollout = Rollout.objects.filter(candidate=hidden_run).first() or Rollout.objects.create(
        candidate=hidden_run, index=0, data={}
    )
    shown_in_open_campaign("run", hidden_run, f"rollout:{rollout.pk}")
    assert [c.spectrum_id for c in vetter_queue(expert)] == [spectra[0].pk]
    assert vetter_queue_hidden(expert).count == 1
    shown_in_open_campaign("content", candidate_of(runs[1], spectra[0]), "import:file#0")
    assert vetter_queue(expert).count() == 0
    assert vetter_queue_hidden(expert).count == len(spectra)
