"""The expert vetting queue: uncertain candidates, one key per decision, stored beside the
agent's verdict and shown in the catalog."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.catalog import selectors as catalog
from annotation.inspections import jobs, services
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry, ExpertDecision
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Task
from annotation.spectra.workbench import spectrum_viewer_context
from tests.factories import ScriptedPolicy, answer_turn, make_spectrum, tool_call_turn

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


class ConfidentPolicy(ScriptedPolicy):
    def __init__(self, turns, confidence):
        super().__init__(turns)
        self.confidence = confidence


@pytest.fixture
def run_candidates(monkeypatch, expert, django_capture_on_commit_callbacks):
    """Run the agent over new spectra with the given confidences (threshold 0.75)."""

    def run(confidences: list[float], *, with_tool_call: bool = False) -> list[Candidate]:
        queue = list(confidences)
        turns = [tool_call_turn(6500, 6630, "H-alpha")] if with_tool_call else []

        def policy_for(spec, sampling=None):
            return ConfidentPolicy([*turns, answer_turn("NO")], queue.pop(0))

        monkeypatch.setattr(jobs, "policy_for", policy_for)
        first = Candidate.objects.count()
        spectra = [
            make_spectrum(object_id=f"VET-{first + i}", seed=first + i)
            for i in range(len(confidences))
        ]
        with django_capture_on_commit_callbacks(execute=True):
            inspection = services.inspection_run_create(
                task=Task.objects.get(code="CV"),
                spectrum_ids=[s.pk for s in spectra],
                policy_spec={"kind": "rule-based"},
                created_by=expert,
                confidence_threshold=0.75,
            )
        return list(inspection.candidates.order_by("id"))

    return run


def decide(client, candidate, decision, comment=""):
    return client.post(
        reverse("vetting_decide"),
        {"candidate": candidate.pk, "decision": decision, "comment": comment},
    )


def test_it_queues_only_uncertain_candidates_oldest_first(run_candidates, expert):
    late, confident, early = run_candidates([0.6, 0.95, 0.5])
    now = timezone.now()
    Candidate.objects.filter(pk=late.pk).update(finished_at=now)
    Candidate.objects.filter(pk=early.pk).update(finished_at=now - timedelta(hours=1))
    assert list(catalog.vetting_queue(expert)) == [early, late]
    assert confident.needs_expert is False


def test_it_leaves_out_what_this_expert_decided_but_not_what_others_did(
    run_candidates, expert, outsider
):
    first, second = run_candidates([0.6, 0.6])
    services.expert_decision_record(candidate=first, expert=outsider, decision="NO")
    assert list(catalog.vetting_queue(expert)) == [first, second]
    services.expert_decision_record(candidate=first, expert=expert, decision="YES")
    assert list(catalog.vetting_queue(expert)) == [second]


def test_it_shows_the_next_candidate_with_plot_trajectory_and_keys(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6], with_tool_call=True)
    response = expert_client.get(reverse("vetting_queue"))
    body = response.content.decode()
    assert response.context["candidate"] == candidate
    assert response.context["remaining"] == 1
    assert response.context["plot_data"]["inspected"] == [[6500.0, 6630.0]]
    assert 'id="plot-data"' in body and "js/spectrum_plot.js" in body and "js/keys.js" in body
    for key, value in (("y", "YES"), ("n", "NO"), ("u", "unsure")):
        assert f'value="{value}" class="vet-{value.lower()}" data-key="{key}"' in body
    assert "Broad Balmer emission with He I." in body


def test_it_says_when_nothing_waits(expert_client, run_candidates):
    run_candidates([0.99])
    response = expert_client.get(reverse("vetting_queue"))
    assert response.context["candidate"] is None
    assert "Nothing waits for you" in response.content.decode()


def test_it_stores_a_decision_shows_it_in_the_catalog_and_moves_on(
    expert_client, run_candidates, expert
):
    first, second = run_candidates([0.6, 0.7])
    response = decide(expert_client, first, "YES", "broad H-alpha")
    assert response.status_code == 302
    assert response["Location"] == reverse("vetting_queue")
    record = ExpertDecision.objects.get(candidate=first)
    assert (record.expert, record.decision, record.comment) == (expert, "YES", "broad H-alpha")
    entry = CatalogEntry.objects.get(candidate=first)
    assert entry.expert_decision == "YES"
    listed = expert_client.get(reverse("catalog_list"), {"expert_decision": "YES"})
    assert [e.object_id for e in listed.context["page"].entries] == [entry.object_id]
    detail = expert_client.get(reverse("catalog_detail", args=[entry.pk])).content.decode()
    assert "broad H-alpha" in detail and "payne" in detail
    assert expert_client.get(reverse("vetting_queue")).context["candidate"] == second


def test_it_keeps_one_decision_per_expert_and_updates_it(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    decide(expert_client, candidate, "YES")
    decide(expert_client, candidate, "unsure", "second look")
    record = ExpertDecision.objects.get(candidate=candidate)
    assert (record.decision, record.comment) == ("unsure", "second look")
    assert CatalogEntry.objects.get(candidate=candidate).expert_decision == "unsure"


def test_it_keeps_each_experts_decision_apart(expert_client, run_candidates, expert, outsider):
    (candidate,) = run_candidates([0.6])
    decide(expert_client, candidate, "YES")
    other = expert_client.__class__()
    other.force_login(outsider)
    decide(other, candidate, "NO")
    decisions = dict(
        ExpertDecision.objects.filter(candidate=candidate).values_list(
            "expert__username", "decision"
        )
    )
    assert decisions == {"payne": "YES", "outsider": "NO"}


def test_it_refuses_an_unknown_decision_and_stores_nothing(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    response = decide(expert_client, candidate, "MAYBE")
    assert response.status_code == 302
    assert f"candidate={candidate.pk}" in response["Location"]
    assert not ExpertDecision.objects.exists()
    page = expert_client.get(response["Location"]).content.decode()
    assert "decision must be YES, NO or unsure" in page


def test_it_refuses_a_decision_before_the_agent_finished(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    Candidate.objects.filter(pk=candidate.pk).update(state=CandidateState.RUNNING)
    decide(expert_client, candidate, "YES")
    assert not ExpertDecision.objects.exists()


def test_it_sends_anonymous_experts_to_the_login_page(client, run_candidates):
    (candidate,) = run_candidates([0.6])
    assert reverse("login") in client.get(reverse("vetting_queue"))["Location"]
    response = decide(client, candidate, "YES")
    assert response.status_code == 302 and reverse("login") in response["Location"]
    assert not ExpertDecision.objects.exists()


def test_it_escapes_a_hostile_comment(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    decide(expert_client, candidate, "NO", HOSTILE)
    entry = CatalogEntry.objects.get(candidate=candidate)
    pages = [
        expert_client.get(reverse("catalog_detail", args=[entry.pk])),
        expert_client.get(reverse("vetting_queue"), {"candidate": candidate.pk}),
    ]
    for page in pages:
        body = page.content.decode()
        assert HOSTILE not in body
        assert "&lt;script&gt;" in body


# --- API --------------------------------------------------------------------------------------


def test_it_gives_the_next_candidate_through_the_api(api_client, run_candidates):
    first, _second = run_candidates([0.6, 0.7], with_tool_call=True)
    response = api_client.get(reverse("api_vetting_next"))
    assert response.status_code == 200
    assert response.data["remaining"] == 2
    candidate = response.data["candidate"]
    assert (candidate["id"], candidate["verdict"], candidate["task"]) == (first.pk, "NO", "CV")
    assert candidate["rollouts"][0]["steps"][0]["tool_name"] == "spectral_visualization_tool"


def test_it_gives_no_candidate_when_the_api_queue_is_empty(api_client, db):
    response = api_client.get(reverse("api_vetting_next"))
    assert response.data == {
        "remaining": 0,
        "candidate": None,
        "hidden": {"count": 0, "campaigns": []},
    }


def test_it_records_then_updates_a_decision_through_the_api(api_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    url = reverse("api_expert_decision_create")
    created = api_client.post(url, {"candidate": candidate.pk, "decision": "NO"}, format="json")
    changed = api_client.post(
        url, {"candidate": candidate.pk, "decision": "YES", "comment": "on reflection"}
    )
    assert (created.status_code, changed.status_code) == (201, 200)
    assert changed.data["decision"] == "YES" and changed.data["expert"] == "payne"
    assert ExpertDecision.objects.get(candidate=candidate).comment == "on reflection"


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ({"decision": "MAYBE"}, 400),
        ({"decision": "YES", "candidate": 999999}, 404),
        ({"decision": "YES", "running": True}, 409),
    ],
)
def test_it_refuses_bad_api_decisions(api_client, run_candidates, payload, status):
    (candidate,) = run_candidates([0.6])
    if payload.pop("running", False):
        Candidate.objects.filter(pk=candidate.pk).update(state=CandidateState.RUNNING)
    body = {"candidate": candidate.pk, **payload}
    response = api_client.post(reverse("api_expert_decision_create"), body, format="json")
    assert response.status_code == status
    assert not ExpertDecision.objects.exists()


def test_it_refuses_anonymous_vetting_api_calls(db):
    client = APIClient()
    assert client.get(reverse("api_vetting_next")).status_code in (401, 403)
    response = client.post(
        reverse("api_expert_decision_create"), {"candidate": 1, "decision": "NO"}
    )
    assert response.status_code in (401, 403)


def test_it_shows_a_split_with_the_tally_in_the_catalog_when_experts_disagree(
    expert_client, run_candidates, expert, outsider
):
    (candidate,) = run_candidates([0.6])
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="YES")
    services.expert_decision_record(candidate=candidate, expert=expert, decision="NO")
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert entry.expert_decision == "split"
    body = expert_client.get(reverse("catalog_list")).content.decode()
    assert "YES 1 · NO 1" in body
    split = expert_client.get(reverse("catalog_list"), {"expert_decision": "split"})
    assert [row.object_id for row in split.context["rows"]] == [entry.object_id]
    assert not expert_client.get(reverse("catalog_list"), {"expert_decision": "NO"}).context["rows"]
    # The outsider changes their mind: the experts agree again.
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="NO")
    assert CatalogEntry.objects.get(candidate=candidate).expert_decision == "NO"


# --- skip and undo (issue 26) ------------------------------------------------------------------


def test_it_skips_a_candidate_for_now_and_comes_back_to_it_at_the_end(
    expert_client, run_candidates
):
    first, second = run_candidates([0.6, 0.7])
    assert expert_client.get(reverse("vetting_queue")).context["candidate"] == first
    body = expert_client.get(reverse("vetting_queue")).content.decode()
    assert 'data-key="s" id="vetting-skip"' in body
    expert_client.post(reverse("vetting_skip"), {"candidate": first.pk})
    assert expert_client.get(reverse("vetting_queue")).context["candidate"] == second
    expert_client.post(reverse("vetting_skip"), {"candidate": second.pk})
    # every one left was skipped: the queue goes round again, nothing was decided
    assert expert_client.get(reverse("vetting_queue")).context["candidate"] == first
    assert not ExpertDecision.objects.exists()


def test_it_undoes_the_last_decision_and_shows_the_candidate_again(
    expert_client, run_candidates, expert
):
    from annotation.core.models import AuditLog

    first, second = run_candidates([0.6, 0.7])
    decide(expert_client, first, "YES", "broad H-alpha")
    page = expert_client.get(reverse("vetting_queue"))
    assert page.context["candidate"] == second
    assert 'data-key="z" id="vetting-undo"' in page.content.decode()
    response = expert_client.post(reverse("vetting_undo"), {"candidate": first.pk})
    assert response["Location"] == f"{reverse('vetting_queue')}?candidate={first.pk}"
    assert not ExpertDecision.objects.filter(candidate=first).exists()
    assert CatalogEntry.objects.get(candidate=first).expert_decision == ""
    assert list(catalog.vetting_queue(expert)) == [first, second]
    assert AuditLog.objects.filter(action="expert_decision_withdrawn", actor=expert).count() == 1
    assert "vetting-undo" not in expert_client.get(reverse("vetting_queue")).content.decode()


def test_it_keeps_the_other_experts_decision_when_one_undoes(
    expert_client, run_candidates, expert, outsider
):
    (candidate,) = run_candidates([0.6])
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="NO")
    decide(expert_client, candidate, "YES")
    assert CatalogEntry.objects.get(candidate=candidate).expert_decision == "split"
    expert_client.post(reverse("vetting_undo"), {"candidate": candidate.pk})
    assert CatalogEntry.objects.get(candidate=candidate).expert_decision == "NO"


# --- issue 37: the whole spectrum viewer in the queue ------------------------------------------

HOSTILE_FILE_TEXT = "<img src=x onerror=alert(1)>%{x}"


def _plot_data(body: str) -> dict:
    match = re.search(r'<script id="plot-data" type="application/json">(.*?)</script>', body)
    assert match, "no plot data"
    return json.loads(match.group(1))


def test_it_shows_the_whole_viewer_in_the_queue(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6], with_tool_call=True)
    body = expert_client.get(reverse("vetting_queue")).content.decode()
    for part in (
        'data-viewer-for="spectrum-plot"',  # lines, z, smoothing, regions, template
        'data-workbench-for="spectrum-plot"',  # redshift fit, compare overlay, sky
        'class="viewer-meta small"',  # the file's metadata
        "js/spectrum_viewer.js",
        "js/spectrum_workbench.js",
    ):
        assert part in body, part
    data = _plot_data(body)
    assert data["inspected"] == [[6500.0, 6630.0]]
    assert data["viewer"]["lines"] and data["viewer"]["limits"]
    # The fit comes once the plot is drawn (the page does not wait for it), from the same builder.
    assert data["viewer"]["redshift_fit"] is None
    fit = expert_client.get(data["viewer"]["redshift_fit_url"]).json()
    assert fit["n_templates"] > 0 and "candidates" in fit and "templates" in fit
    # 0-4 set the quality in the queue: the viewer's whole-spectrum key there is Home.
    assert 'data-viewer="zoom-whole" aria-keyshortcuts="Home"' in body
    assert 'data-viewer="zoom-whole" data-key="0"' not in body


def test_it_keeps_file_text_inert_in_the_queues_viewer(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    spectrum = candidate.spectrum
    spectrum.meta = {**spectrum.meta, "OBJNAME": HOSTILE_FILE_TEXT, "BUNIT": HOSTILE_FILE_TEXT}
    spectrum.save(update_fields=["meta"])
    body = expert_client.get(reverse("vetting_queue")).content.decode()
    assert "<img src=x" not in body
    data = _plot_data(body)
    assert "<img" not in json.dumps(data["viewer"]["flux_unit"])


def test_it_prints_what_the_whole_viewer_costs_per_candidate(expert_client, run_candidates):
    candidates = run_candidates([0.6, 0.6, 0.6, 0.6, 0.6], with_tool_call=True)
    expert_client.get(reverse("vetting_queue"))  # warm: the fit's templates, once per process
    spectrum, task, user = (
        candidates[0].spectrum,
        candidates[0].run.task,
        candidates[0].run.created_by,
    )
    rounds = 5
    started = time.perf_counter()
    for _ in range(rounds):
        spectra_selectors.spectrum_plot_data(row=spectrum, task=task)
    plot_only = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        spectrum_viewer_context(row=spectrum, task=task, user=user, fit_later=True)
    whole = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        spectra_selectors.spectrum_redshift_fit(spectrum)
    fit = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        assert expert_client.get(reverse("vetting_queue")).status_code == 200
    page = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for candidate in candidates[1:]:
        assert decide(expert_client, candidate, "YES").status_code == 302
        assert expert_client.get(reverse("vetting_queue")).status_code == 200
    decision = (time.perf_counter() - started) / (len(candidates) - 1)
    print(
        f"\nqueue server side, one candidate: plot data alone {plot_only * 1000:.0f} ms, the "
        f"whole viewer's data {whole * 1000:.0f} ms (+{(whole - plot_only) * 1000:.0f} ms; the "
        f"redshift fit, asked for after the plot is drawn, {fit * 1000:.0f} ms); "
        f"queue page GET {page * 1000:.0f} ms; decision POST + next page "
        f"{decision * 1000:.0f} ms"
    )
