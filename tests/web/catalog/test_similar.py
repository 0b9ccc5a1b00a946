""" "Find more like this" (issue 35 part 3): embeddings kept in step with the spectra, the
neighbours (service, page, API) with their filters, the visibility rules applied to them
(hidden and deleted spectra never come back, gold labels stay masked), and "queue these"."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.catalog import similar
from annotation.inspections import services as inspection_services
from annotation.inspections.models import Candidate, Rollout
from annotation.learning import services as learning_services
from annotation.rating.models import CampaignItem, RatingCampaign
from annotation.spectra import embeddings, neighbour_index
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, SpectrumEmbedding, Task
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

HALPHA, HBETA = 6564.61, 4862.68


@pytest.fixture(autouse=True)
def _fresh_index():
    neighbour_index.reset()
    yield
    neighbour_index.reset()


def near_halpha(n: int, *, dataset: str = "tests", start: int = 0) -> list[Spectrum]:
    """Spectra whose one line sits nearer and nearer H-alpha: the k-th is the k-th nearest."""
    return [
        make_spectrum(
            object_id=f"HA-{start + k}",
            dataset=dataset,
            line_center=HALPHA + 6.0 * (start + k + 1),
            seed=start + k + 1,
        )
        for k in range(n)
    ]


@pytest.fixture
def world(db):
    query = make_spectrum(object_id="QUERY", line_center=HALPHA, seed=100)
    close = near_halpha(4)
    far = make_spectrum(object_id="FAR", line_center=HBETA, seed=200)
    return {"query": query, "close": close, "far": far}


def ids_of(result: similar.SimilarResult) -> list[int]:
    return [row.spectrum_id for row in result.neighbours]


def search(user, spectrum, **params) -> similar.SimilarResult:
    filters = similar.similar_filters_from_query({"k": 10, **params})
    return similar.similar_spectra(user=user, spectrum=spectrum, filters=filters)


# --- service: the embeddings and the index follow the spectra ---------------------------------


def test_it_embeds_each_spectrum_when_it_is_stored(world):
    rows = SpectrumEmbedding.objects.filter(spectrum__in=[world["query"], world["far"]])
    assert rows.count() == 2
    for row in rows:
        assert row.error == "" and row.basis == embeddings.current_basis().id
        assert embeddings.vector_of(row).shape == (embeddings.current_basis().size,)


def test_it_finds_the_nearest_spectra_nearest_first(world, expert):
    result = search(expert, world["query"])
    assert ids_of(result) == [row.pk for row in world["close"]] + [world["far"].pk]
    distances = [row.distance for row in result.neighbours]
    assert distances == sorted(distances) and distances[0] > 0
    assert world["query"].pk not in ids_of(result)
    assert "IndexFlatL2" in result.method


def test_the_distances_are_those_of_the_stored_vectors(world, expert):
    result = search(expert, world["query"], k=1)
    stored = {
        row.spectrum_id: embeddings.vector_of(row)
        for row in SpectrumEmbedding.objects.filter(
            spectrum__in=[world["query"], world["close"][0]]
        )
    }
    expected = np.linalg.norm(stored[world["query"].pk] - stored[world["close"][0].pk])
    assert result.neighbours[0].distance == pytest.approx(float(expected), rel=1e-4)


def test_a_spectrum_stored_after_the_index_was_built_is_found_at_once(world, expert):
    search(expert, world["query"])  # builds the index
    newcomer = make_spectrum(object_id="NEW", line_center=HALPHA + 1.0, seed=300)
    assert ids_of(search(expert, world["query"], k=1)) == [newcomer.pk]


def test_a_spectrum_deleted_after_the_index_was_built_never_comes_back(world, expert):
    search(expert, world["query"])
    gone = world["close"][0]
    gone_id = gone.pk
    gone.delete()
    neighbour_index._state.checked_at = float("inf")  # the index is not rebuilt: still stale
    assert gone_id in neighbour_index.nearest(embeddings.vector_of(world["query"].embedding), 3).ids
    assert gone_id not in ids_of(search(expert, world["query"]))


def test_a_new_redshift_moves_the_embedding_to_the_new_rest_frame(world, expert):
    row = world["far"]
    before = bytes(row.embedding.vector)
    spectra_services.spectrum_redshift_decide(spectrum=row, actor=expert, z=0.05, source="override")
    row.embedding.refresh_from_db()
    assert row.embedding.redshift == 0.05 and bytes(row.embedding.vector) != before


def test_the_sync_writes_missing_embeddings_and_says_why_one_cannot_be(world):
    SpectrumEmbedding.objects.filter(spectrum=world["far"]).delete()
    assert embeddings.embeddings_sync() == 1
    assert embeddings.embeddings_sync() == 0
    Spectrum.objects.filter(pk=world["far"].pk).update(redshift=1.5)  # 3700-9100 A at z 1.5
    assert embeddings.embeddings_sync() == 1
    row = SpectrumEmbedding.objects.get(spectrum=world["far"])
    assert row.vector == b"" and "covers" in row.error and "rest-frame grid" in row.error


# --- filters ----------------------------------------------------------------------------------


def test_an_unknown_task_matches_nothing_as_in_the_catalog(world, expert):
    result = search(expert, world["query"], task="NOPE")
    assert result.neighbours == [] and "no task has the code 'NOPE'" in result.method


def test_it_filters_by_data_set(world, expert):
    other = near_halpha(2, dataset="survey-b", start=10)
    assert ids_of(search(expert, world["query"], dataset="survey-b")) == [row.pk for row in other]


def test_a_narrow_filter_is_answered_past_the_first_fetch(world, expert, monkeypatch):
    monkeypatch.setattr(similar, "FIRST_FETCH", 1)
    monkeypatch.setattr(similar, "MAX_FETCH", 2)
    result = search(expert, world["query"], k=1, dataset="tests", task="CV")
    assert result.neighbours == []  # no spectrum was inspected for CV
    run_spectrum = world["far"]
    make_inspected(spectra=[run_spectrum], verdicts={run_spectrum.pk: ("NO", 0.9)})
    result = search(expert, world["query"], k=1, task="CV")
    assert ids_of(result) == [run_spectrum.pk] and result.method.startswith("exact numpy")


def labelled(spectrum: Spectrum, experts: list, value: str = "YES") -> Candidate:
    run = make_inspected(spectra=[spectrum], verdicts={spectrum.pk: (value, 0.9)}, threshold=0.999)
    candidate = run.candidates.get()
    for user in experts:
        inspection_services.expert_decision_record(candidate=candidate, expert=user, decision=value)
    return candidate


def test_it_filters_vetted_or_not_and_shows_the_labels(world, expert, outsider):
    vetted = world["close"][1]
    labelled(vetted, [expert, outsider])
    yes = search(expert, world["query"], vetted="yes")
    assert ids_of(yes) == [vetted.pk] and yes.neighbours[0].labels == (("CV", "YES"),)
    no = ids_of(search(expert, world["query"], vetted="no"))
    assert vetted.pk not in no and len(no) == 4
    assert ids_of(search(expert, world["query"], vetted="yes", task="MG")) == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"k": "0"}, "k must be a whole number from 1 to 100"),
        ({"k": "abc"}, "k must be a whole number"),
        ({"task": "T" * 17}, "task must be at most 16 characters"),
        ({"vetted": "maybe"}, "vetted must be one of yes, no"),
        ({"dataset": "x" * 81}, "dataset must be at most 80 characters"),
    ],
)
def test_it_names_a_bad_filter(db, params, message):
    with pytest.raises(similar.CatalogQueryError, match=message):
        similar.similar_filters_from_query(params)


# --- visibility -------------------------------------------------------------------------------


def rates_open_campaign(user, spectrum: Spectrum) -> RatingCampaign:
    run = make_inspected(spectra=[spectrum], verdicts={spectrum.pk: ("YES", 0.9)})
    rollout, _ = Rollout.objects.get_or_create(
        candidate=run.candidates.get(), index=0, defaults={"data": {}}
    )
    campaign = RatingCampaign.objects.create(name="open")
    campaign.raters.set([user])
    CampaignItem.objects.create(
        campaign=campaign,
        blind_id="B1",
        data={},
        policy_name="rule-based",
        source=f"rollout:{rollout.pk}",
        task=Task.objects.get(code="CV"),
        spectrum=spectrum,
    )
    return campaign


def test_a_spectrum_an_open_campaign_hides_is_no_neighbour_of_its_rater(world, expert, auditor):
    hidden = world["close"][0]
    campaign = rates_open_campaign(expert, hidden)
    assert hidden.pk not in ids_of(search(expert, world["query"]))
    assert hidden.pk in ids_of(search(auditor, world["query"]))  # does not rate it
    assert similar.spectrum_for(user=expert, spectrum_id=hidden.pk) is None
    campaign.closed = True
    campaign.save()
    assert hidden.pk in ids_of(search(expert, world["query"]))


def test_a_waiting_gold_item_s_label_is_not_shown_nor_filtered_on(world, expert, outsider, staff):
    gold_spectrum = world["close"][0]
    candidate = labelled(gold_spectrum, [expert, outsider])
    learning_services.gold_item_mark(candidate=candidate, actor=staff)
    vetter = UserFactory(username="newcomer", roles=["expert"])
    row = next(
        r for r in search(vetter, world["query"]).neighbours if r.spectrum_id == gold_spectrum.pk
    )
    assert row.labels == ()
    assert gold_spectrum.pk not in ids_of(search(vetter, world["query"], vetted="yes"))
    assert gold_spectrum.pk in ids_of(search(vetter, world["query"], vetted="no"))
    assert ids_of(search(expert, world["query"], vetted="yes")) == [gold_spectrum.pk]


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_page_and_api_answer_404_for_a_hidden_spectrum_and_403_for_a_rater(
    world, expert, rater
):
    hidden = world["close"][0]
    rates_open_campaign(expert, hidden)
    assert client_for(expert).get(reverse("spectrum_similar", args=[hidden.pk])).status_code == 404
    api = api_for(expert).get(reverse("api_spectrum_similar", args=[hidden.pk]))
    assert api.status_code == 404
    listed = api_for(expert).get(reverse("api_spectrum_similar", args=[world["query"].pk]))
    assert hidden.pk not in [row["spectrum_id"] for row in listed.json()["neighbours"]]
    for url in ("spectrum_similar", "api_spectrum_similar"):
        assert client_for(rater).get(reverse(url, args=[world["query"].pk])).status_code == 403


# --- page and API -----------------------------------------------------------------------------


def test_the_page_lists_the_neighbours_escaped_with_a_link_from_the_spectrum(world, expert):
    Spectrum.objects.filter(pk=world["close"][0].pk).update(object_id="<script>x()</script>")
    client = client_for(expert)
    detail = client.get(reverse("spectrum_detail", args=[world["query"].pk])).content.decode()
    assert reverse("spectrum_similar", args=[world["query"].pk]) in detail
    page = client.get(reverse("spectrum_similar", args=[world["query"].pk]), {"k": 3})
    body = page.content.decode()
    assert page.status_code == 200 and body.count('class="neighbour"') == 3
    assert "<script>x()</script>" not in body and "&lt;script&gt;x()&lt;/script&gt;" in body
    assert "Queue these for vetting" not in body  # experts do not requeue; staff do


def test_the_page_names_a_bad_filter_with_400(world, expert):
    page = client_for(expert).get(reverse("spectrum_similar", args=[world["query"].pk]), {"k": 0})
    assert (
        page.status_code == 400
        and "k must be a whole number from 1 to 100" in page.content.decode()
    )


def test_the_api_returns_neighbours_with_distances_and_labels(world, expert, outsider):
    labelled(world["close"][0], [expert, outsider])
    response = api_for(expert).get(
        reverse("api_spectrum_similar", args=[world["query"].pk]), {"k": 2}
    )
    data = response.json()
    assert response.status_code == 200 and data["basis"] == embeddings.current_basis().id
    assert [row["spectrum_id"] for row in data["neighbours"]] == [r.pk for r in world["close"][:2]]
    assert data["neighbours"][0]["labels"] == {"CV": "YES"}
    assert data["neighbours"][1]["labels"] == {}
    bad = api_for(expert).get(
        reverse("api_spectrum_similar", args=[world["query"].pk]), {"vetted": "x"}
    )
    assert bad.status_code == 400 and "vetted must be one of" in bad.json()["detail"]


# --- queue these for vetting ------------------------------------------------------------------


@pytest.fixture
def inspected(world, expert, outsider):
    """close[0]: finished, never routed to experts; close[1]: labelled; close[2]: waiting
    already; close[3]: no CV inspection."""
    close = world["close"]
    run = make_inspected(
        spectra=close[:3],
        verdicts={row.pk: ("YES", 0.99) for row in close[:3]},
        threshold=0.5,
    )
    Candidate.objects.filter(run=run).update(needs_expert=False)
    Candidate.objects.filter(run=run, spectrum=close[2]).update(needs_expert=True)
    labelled(close[1], [expert, outsider])
    return run


def test_staff_queue_the_neighbours_that_need_it(world, inspected, staff):
    close = world["close"]
    response = api_for(staff).post(
        reverse("api_spectrum_similar_queue", args=[world["query"].pk]),
        {"task": "CV", "spectra": [row.pk for row in close] + [999999]},
        format="json",
    )
    data = response.json()
    first = Candidate.objects.get(run=inspected, spectrum=close[0])
    assert response.status_code == 200
    assert data["queued"] == [first.pk] and data["labelled"] == [close[1].pk]
    assert data["waiting"] == [close[2].pk] and data["no_candidate"] == [close[3].pk]
    assert data["not_found"] == [999999]
    first.refresh_from_db()
    assert first.needs_expert is True


def test_the_queue_button_requeues_from_the_page(world, inspected, staff):
    close = world["close"]
    client = client_for(staff)
    page = client.get(reverse("spectrum_similar", args=[world["query"].pk]))
    assert "Queue these for vetting" in page.content.decode()
    response = client.post(
        reverse("spectrum_similar_queue", args=[world["query"].pk]),
        {"task": "CV", "spectrum": [row.pk for row in close], "query": "k=10"},
        follow=True,
    )
    body = response.content.decode()
    assert "1 candidate queued for CV" in body and "1 labelled already" in body
    assert Candidate.objects.get(run=inspected, spectrum=close[0]).needs_expert is True


def test_only_staff_queue_and_a_task_is_required(world, inspected, expert, staff):
    url = reverse("api_spectrum_similar_queue", args=[world["query"].pk])
    body = {"task": "CV", "spectra": [world["close"][0].pk]}
    assert api_for(expert).post(url, body, format="json").status_code == 403
    missing = api_for(staff).post(url, {**body, "task": "NOPE"}, format="json")
    assert missing.status_code == 404 and "task" in missing.json()["detail"]  # names the field
    assert Candidate.objects.get(run=inspected, spectrum=world["close"][0]).needs_expert is False


def test_a_hidden_spectrum_is_not_queued(world, inspected, staff):
    hidden = world["close"][0]
    rates_open_campaign(staff, hidden)
    response = api_for(staff).post(
        reverse("api_spectrum_similar_queue", args=[world["query"].pk]),
        {"task": "CV", "spectra": [hidden.pk]},
        format="json",
    )
    assert response.json()["queued"] == [] and response.json()["not_found"] == [hidden.pk]


def test_the_sync_command_says_what_it_wrote(world):
    from io import StringIO

    from django.core.management import call_command

    SpectrumEmbedding.objects.filter(spectrum=world["far"]).delete()
    out = StringIO()
    call_command("embeddings_sync", stdout=out)
    assert out.getvalue().startswith(
        f"1 embeddings written with basis {embeddings.current_basis().id}"
    )


def test_a_saved_index_is_read_back_and_caught_up_instead_of_built(
    world, expert, tmp_path, monkeypatch
):
    path = tmp_path / "neighbours.faiss"
    monkeypatch.setenv("SPECVET_NEIGHBOUR_INDEX", str(path))
    first = ids_of(search(expert, world["query"]))
    assert path.exists() and path.with_suffix(".json").exists()
    neighbour_index.reset()  # a new process

    def no_build(*args, **kwargs):
        raise AssertionError("built again instead of read")

    monkeypatch.setattr(neighbour_index.vector_index, "build_index", no_build)
    assert ids_of(search(expert, world["query"])) == first
    newcomer = make_spectrum(object_id="NEW", line_center=HALPHA + 1.0, seed=300)
    assert ids_of(search(expert, world["query"], k=1)) == [newcomer.pk]
