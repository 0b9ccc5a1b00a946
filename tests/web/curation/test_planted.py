"""Planted-error audits: copies go to auditors unrecognisable, are scored, and go nowhere else."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent.editing import EditedStep, apply_edit, edit_from_trajectory
from agent.vetting_statistics import wilson_interval
from annotation.core.errors import NotAllowed, WrongState
from annotation.core.models import Job
from annotation.curation import analysis, planted, revised, selectors
from annotation.curation import services as curation_services
from annotation.curation.models import Curation, CurationState, PlantedError
from annotation.home import pending_work
from annotation.spectra import selectors as spectra_selectors
from tests.factories import UserFactory, make_curation, make_revised_curation
from tests.web.curation.test_services import revise

pytestmark = pytest.mark.django_db

ALL_KINDS = ["wrong_window", "misread_line", "flipped_answer", "contradicting_step"]


@pytest.fixture
def reviser(db):
    return UserFactory(username="reviser", roles=["expert"])


@pytest.fixture
def source_auditors(db):
    """The two experts who approved the sources (they would recognise a copy)."""
    return [
        UserFactory(username="first_source_auditor", roles=["expert"]),
        UserFactory(username="second_source_auditor", roles=["expert"]),
    ]


@pytest.fixture
def ada(db):
    return UserFactory(username="ada", roles=["expert"])


@pytest.fixture
def bo(db):
    return UserFactory(username="bo", roles=["expert"])


@pytest.fixture
def sources(reviser, source_auditors):
    return [
        make_revised_curation(
            reviser=reviser, auditors=source_auditors, object_id=f"SRC-{n}", seed=n
        )
        for n in range(4)
    ]


def plant(staff, *, kinds=ALL_KINDS, count=4, seed=0, auditors=()):
    return planted.plant_round_create(
        actor=staff, kinds=kinds, count=count, seed=seed, auditors=list(auditors)
    )


def real_in_audit(*, reviser, auditors, staff, object_id="REAL-1", flipped="NO"):
    """A real trajectory in its first audit round, its auditors assigned by staff, whose
    reviser changed the answer (as the planted flip does)."""
    curation = make_curation(object_id=object_id, seed=9)
    curation_services.curation_screen(curation=curation, user=auditors[0], keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    head = selectors.head_version(curation)
    base = selectors.version_trajectory(head)
    _, answer = edit_from_trajectory(base)
    edited = apply_edit(  # the reviser's edit of make_revised_curation, answering NO
        base,
        tool=spectra_selectors.spectrum_tool(curation.spectrum),
        steps=[EditedStep("Zoom on the core.", (6540.0, 6590.0), "H-alpha core")],
        answer=replace(answer, prediction=flipped),
    )
    curation_services.curation_save_revision(
        curation=curation, user=reviser, base_number=head.number, trajectory=edited
    )
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    for role, auditor in zip(("auditor_1", "auditor_2"), auditors, strict=True):
        curation_services.curation_reassign(curation=curation, role=role, user=auditor, actor=staff)
    curation.refresh_from_db()
    return curation


def audit(curation, user, verdict="approve", step_comments=None, comment=""):
    curation.refresh_from_db()
    return curation_services.audit_submit(
        curation=curation,
        user=user,
        version_number=curation.head_number,
        verdict=verdict,
        comment=comment or ("Something is off." if verdict == "request_changes" else ""),
        step_comments=step_comments,
    )


# --- planting --------------------------------------------------------------------------------------


def test_it_plants_copies_in_audit_with_the_sources_history(sources, staff, ada, bo):
    plant_round = plant(staff, auditors=[ada, bo])
    errors = list(plant_round.errors.select_related("curation", "source"))
    assert sorted(e.kind for e in errors) == sorted(ALL_KINDS)
    for error in errors:
        copy, source = error.curation, error.source
        assert copy.planted and not source.planted
        assert copy.state == CurationState.IN_AUDIT and copy.audit_round == 1
        assert (copy.auditor_1, copy.auditor_2, copy.reviser) == (ada, bo, source.reviser)
        assert copy.spectrum_id == source.spectrum_id and copy.head_number == error.source_version
        original = source.versions.get(number=error.source_version)
        head = selectors.head_version(copy)
        assert (head.kind, head.author_id) == (original.kind, original.author_id)
        assert head.data != original.data  # the error is in
        assert copy.versions.get(number=1).data == source.versions.get(number=1).data
        actions = list(selectors.curation_history(curation=copy).values_list("action", flat=True))
        assert actions[0] == "curation_created" and "submitted_for_audit" in actions
        assert "planted_round_created" not in actions


def test_it_plants_each_kind_where_it_says(sources, staff):
    plant(staff)
    for error in PlantedError.objects.select_related("curation"):
        head = selectors.trajectory_view(selectors.head_version(error.curation).data)
        original = selectors.trajectory_view(
            error.source.versions.get(number=error.source_version).data
        )
        if error.kind == "flipped_answer":
            assert error.target == len(head.steps)
            assert head.answer.prediction != original.answer.prediction
            assert head.steps == original.steps or [s.think for s in head.steps] == [
                s.think for s in original.steps
            ]
        else:
            step, before = head.steps[error.target], original.steps[error.target]
            assert head.answer.prediction == original.answer.prediction
            if error.kind == "wrong_window":
                assert step.wavelength_range != before.wavelength_range
                assert step.image_sha != before.image_sha  # re-rendered for the new range
                assert step.think == before.think
            else:
                assert step.think != before.think
                assert step.wavelength_range == before.wavelength_range


def test_it_picks_the_same_copies_for_the_same_seed(sources, staff):
    first = plant(staff, count=2, seed=5)
    second = plant(staff, count=2, seed=5)
    pick = [(e.source_id, e.kind, e.description) for e in first.errors.all()]
    assert pick == [(e.source_id, e.kind, e.description) for e in second.errors.all()]


def test_it_lets_only_staff_plant(sources, ada):
    with pytest.raises(NotAllowed):
        plant(ada)


def test_it_refuses_more_copies_than_approved_trajectories(sources, staff):
    with pytest.raises(WrongState):
        plant(staff, count=5)


def test_it_refuses_a_source_reviser_as_auditor(sources, staff, reviser):
    with pytest.raises(NotAllowed):
        plant(staff, count=1, auditors=[reviser])


def test_it_offers_unassigned_copies_to_claim_but_not_to_the_sources_auditors(
    sources, staff, ada, source_auditors
):
    plant(staff, count=2)
    copies = set(Curation.objects.filter(planted=True).values_list("pk", flat=True))
    assert copies <= set(
        selectors.curation_queues(user=ada)["claim_audit"].values_list("pk", flat=True)
    )
    for auditor in source_auditors:
        queue = selectors.curation_queues(user=auditor)["claim_audit"]
        assert not copies & set(queue.values_list("pk", flat=True))


# --- the auditor cannot tell ---------------------------------------------------------------------


class _Shape(HTMLParser):
    """The tags and attributes of a page, with numbers and hashes blanked and text and diff
    segments (which differ between any two trajectories) left out."""

    SKIPPED = {"ins", "del"}

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIPPED:
            return
        shown = []
        for name, value in sorted(attrs):
            if name in {"value", "title", "alt", "aria-label", "data-range"}:
                value = "*"  # a value from the trajectory's text
            shown.append(f"{name}={_blank(value or '')}")
        self.tags.append(f"<{tag} {' '.join(shown)}>")


def _blank(text: str) -> str:
    text = re.sub(r"[0-9a-f]{64}", "H", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def page_shape(html: str) -> list[str]:
    parser = _Shape()
    parser.feed(html.split("<main", 1)[-1])
    return parser.tags


def json_shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: json_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_shape(value[0])] if value else []
    return type(value).__name__


@pytest.fixture
def pair(sources, staff, reviser, ada, bo):
    """A planted copy (a flipped answer: same steps as the real one) and a real trajectory,
    both in their first audit round with ada and bo assigned by staff."""
    plant(staff, kinds=["flipped_answer"], count=1, auditors=[ada, bo])
    copy = Curation.objects.get(planted=True)
    real = real_in_audit(reviser=reviser, auditors=[ada, bo], staff=staff)
    return copy, real


def test_it_shows_the_auditor_the_same_audit_page(pair, ada):
    copy, real = pair
    client = Client()
    client.force_login(ada)
    pages = [client.get(reverse("curation_audit", args=[c.pk])) for c in (copy, real)]
    assert [p.status_code for p in pages] == [200, 200]
    assert page_shape(pages[0].content.decode()) == page_shape(pages[1].content.decode())
    assert b"planted" not in pages[0].content.lower()


def test_it_shows_the_auditor_the_same_detail_page(pair, ada):
    copy, real = pair
    client = Client()
    client.force_login(ada)
    for tab in ("trajectory", "history"):
        pages = [
            client.get(reverse("curation_detail", args=[c.pk]), {"tab": tab}) for c in (copy, real)
        ]
        assert page_shape(pages[0].content.decode()) == page_shape(pages[1].content.decode())
        assert b"planted" not in pages[0].content.lower()


def test_it_answers_the_auditor_the_same_api_shapes(pair, ada):
    copy, real = pair
    api = APIClient()
    api.force_authenticate(ada)
    for name in ("api_curation_detail", "api_curation_history"):
        bodies = [api.get(reverse(name, args=[c.pk])).json() for c in (copy, real)]
        assert json_shape(bodies[0]) == json_shape(bodies[1])
        assert "planted" not in str(bodies[0]).lower()
    details = [api.get(reverse("api_curation_detail", args=[c.pk])).json() for c in (copy, real)]
    for key in ("state", "audit_round", "source", "your_roles", "actions", "reviser"):
        assert details[0][key] == details[1][key], key
    queues = api.get(reverse("api_curation_my_work")).json()["queues"]
    assert queues["audit"]["ids"] == sorted([copy.pk, real.pk])


# --- scoring ---------------------------------------------------------------------------------------


def test_it_scores_catches_per_auditor_and_kind_with_wilson_intervals(sources, staff, ada, bo):
    plant(staff, kinds=["flipped_answer", "wrong_window"], count=4, auditors=[ada, bo])
    errors = list(PlantedError.objects.select_related("curation").order_by("id"))
    for error in errors:  # ada catches every error and points at it; bo catches only flips
        audit(error.curation, ada, "request_changes", {str(error.target): "This is wrong."})
        if error.kind == "flipped_answer":
            audit(error.curation, bo, "request_changes", {"0": "Elsewhere."})
        else:
            audit(error.curation, bo, "approve")
    rates = planted.catch_rates()
    by_auditor = {rate.key: rate for rate in rates.by_auditor}
    assert (by_auditor["ada"].n, by_auditor["ada"].caught, by_auditor["ada"].located) == (4, 4, 4)
    assert (by_auditor["bo"].n, by_auditor["bo"].caught, by_auditor["bo"].located) == (4, 2, 0)
    assert by_auditor["bo"].interval == pytest.approx(wilson_interval(2, 4))
    by_kind = {rate.key: rate for rate in rates.by_kind}
    assert (by_kind["flipped_answer"].caught, by_kind["wrong_window"].caught) == (4, 2)
    assert (rates.overall.n, rates.overall.caught, rates.pending) == (8, 6, 0)
    both = {rate.key: rate for rate in rates.by_auditor_and_kind}
    assert both["bo:wrong_window"].rate == 0.0
    low, high = both["bo:wrong_window"].interval
    assert low == 0.0 and 0.6 < high < 0.7  # Wilson 95 % of 0 of 2


# --- planted copies go nowhere else -------------------------------------------------------------


def test_it_never_standardizes_votes_on_or_exports_an_approved_copy(
    sources, staff, ada, bo, django_capture_on_commit_callbacks
):
    plant(staff, kinds=["misread_line"], count=1, auditors=[ada, bo])
    copy = Curation.objects.get(planted=True)
    jobs_before = Job.objects.filter(kind="standardize").count()
    audit(copy, ada)
    audit(copy, bo)  # both missed it
    copy.refresh_from_db()
    assert copy.state == CurationState.APPROVED
    assert Job.objects.filter(kind="standardize").count() == jobs_before
    with pytest.raises(WrongState):
        curation_services.vote_cast(curation=copy, user=ada, value="accept")
    assert copy.pk not in {item.curation.pk for item in revised.expert_revisions()}
    assert copy.pk not in set(selectors.accepted_curations().values_list("pk", flat=True))
    assert copy.pk not in set(planted.plant_sources().values_list("pk", flat=True))
    assert (
        sum(row["count"] for row in analysis.state_counts())
        == Curation.objects.filter(planted=False).count()
    )


def test_it_refuses_to_standardize_a_copy(sources, staff, ada, bo):
    plant(staff, count=1, auditors=[ada, bo])
    copy = Curation.objects.get(planted=True)
    with pytest.raises(WrongState):
        curation_services.curation_standardize(
            curation=copy,
            trajectory=selectors.version_trajectory(selectors.head_version(copy)),
            standardizer={"name": "x"},
        )


def test_it_keeps_a_caught_copy_out_of_the_revisers_queues_and_the_lists(
    sources, staff, ada, bo, reviser
):
    plant(staff, kinds=["flipped_answer"], count=1, auditors=[ada, bo])
    copy = Curation.objects.get(planted=True)
    listed = set(selectors.curation_list(state=CurationState.IN_AUDIT).values_list("pk", flat=True))
    assert copy.pk in listed  # while in audit it is listed where a real one would be
    before = {row["text"]: row["count"] for row in pending_work(reviser)}
    audit(copy, ada, "request_changes", {"0": "No."})
    audit(copy, bo, "request_changes", {"0": "No."})
    copy.refresh_from_db()
    assert copy.state == CurationState.CHANGES_REQUESTED
    queues = selectors.curation_queues(user=reviser)
    assert not queues["revise"].filter(pk=copy.pk).exists()
    assert {row["text"]: row["count"] for row in pending_work(reviser)} == before
    assert not selectors.curation_list().filter(pk=copy.pk).exists()
    with pytest.raises(WrongState):
        revise(copy, reviser)


def test_it_leaves_copies_out_of_the_audit_agreement(sources, staff, ada, bo):
    before = analysis.audit_agreement()
    assert before.rounds == 4 and before.agreed == 4  # the sources' approving rounds
    plant(staff, kinds=["flipped_answer"], count=1, auditors=[ada, bo])
    copy = Curation.objects.get(planted=True)
    audit(copy, ada, "request_changes", {"0": "No."})
    audit(copy, bo)
    assert analysis.audit_agreement() == before


def test_it_counts_an_auditors_planted_audit_on_their_home_page_as_any_audit(pair, ada):
    rows = {row["text"]: row["count"] for row in pending_work(ada)}
    assert rows["audits assigned to you"] == 2


# --- staff pages and APIs ---------------------------------------------------------------------------


def test_it_plants_a_round_from_the_staff_page(sources, staff, ada, bo):
    client = Client()
    client.force_login(staff)
    response = client.post(
        reverse("curation_planted"),
        {
            "kinds": ["flipped_answer", "misread_line"],
            "count": 2,
            "seed": 3,
            "auditors": ["ada", "bo"],
        },
    )
    assert response.status_code == 302
    assert PlantedError.objects.count() == 2
    page = client.get(reverse("curation_planted")).content.decode()
    assert "flipped final answer" in page and 'id="catch-rates"' in page


def test_it_plants_and_reports_through_the_api(sources, staff, ada, bo):
    api = APIClient()
    api.force_authenticate(staff)
    response = api.post(
        reverse("api_curation_planted"),
        {"kinds": ["wrong_window"], "count": 1, "seed": 1, "auditors": ["ada"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    error = response.json()["copies"][0]
    copy = Curation.objects.get(pk=error["curation"])
    audit(copy, ada, "request_changes", {str(error["target"]): "Wrong window."})
    body = api.get(reverse("api_curation_planted")).json()
    assert body["catch_rates"]["overall"]["caught"] == 1
    assert body["rounds"][0]["copies"][0]["verdicts"] == [
        {"auditor": "ada", "verdict": "request_changes", "caught": True, "located": True}
    ]
    analysis_body = api.get(reverse("api_curation_analysis")).json()
    assert analysis_body["catch_rates"]["by_auditor"][0]["key"] == "ada"
    assert analysis_body["catch_rates"]["by_auditor"][0]["wilson_low"] == pytest.approx(
        wilson_interval(1, 1)[0]
    )


def test_it_shows_catch_rates_on_the_curation_analysis_page(sources, staff, ada, bo):
    plant(staff, kinds=["flipped_answer"], count=1, auditors=[ada, bo])
    audit(Curation.objects.get(planted=True), ada, "request_changes", {"0": "No."})
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("curation_analysis")).content.decode()
    assert 'data-key="ada"' in page and "Audit agreement" in page


@pytest.mark.parametrize(
    "name",
    ["curation_planted", "curation_analysis", "api_curation_planted", "api_curation_analysis"],
)
def test_it_refuses_planted_status_to_auditors(sources, staff, ada, name):
    plant(staff, count=1, auditors=[ada])
    client = Client()
    client.force_login(ada)
    assert client.get(reverse(name)).status_code == 403
    assert client.post(reverse(name), {"kinds": ["flipped_answer"], "count": 1}).status_code == 403
