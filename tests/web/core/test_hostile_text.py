"""Model output and expert text are untrusted: every page that shows them escapes them.

The world is built with a script-injection payload in everything a model, an expert or an
uploader writes (reasoning, tool labels, answers, justifications, audit and vote comments,
revision notes, discard reasons, rating comments, judge reasons, task, run, campaign and judge
names, object ids, file names). Each page must show the payload as text, never as markup.
No field accepts rich text, so nothing is sanitized (nh3) rather than escaped.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from annotation.core.charts import plotly_text
from annotation.spectra import services
from annotation.spectra.models import Spectrum
from tests.web.security_world import World, world_rolled_back

pytestmark = pytest.mark.django_db

PAYLOADS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']
RAW = ("<script>alert(1)", "<img src=x")  # what a browser would run


@pytest.fixture(scope="module", params=PAYLOADS, ids=["script", "img-onerror"])
def world(request, django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        request.param, django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


def client_for(world: World, name: str) -> Client:
    client = Client()
    client.force_login(world.users[name])
    return client


# (page, who looks, path arguments, query) over the world's objects.
PAGES = [
    ("curation_my_work", "reviser", lambda w: [], {}),
    ("curation_list", "outsider", lambda w: [], {}),
    ("curation_detail", "outsider", lambda w: [w.curation.pk], {}),
    ("curation_detail", "outsider", lambda w: [w.curation.pk], {"tab": "history"}),
    ("curation_detail", "outsider", lambda w: [w.discarded.pk], {"tab": "history"}),
    ("curation_version", "outsider", lambda w: [w.curation.pk, 2], {}),
    ("curation_screen", "outsider", lambda w: [w.discarded.pk], {}),
    ("curation_revise", "reviser", lambda w: [w.open_curation.pk], {}),
    ("curation_audit", "auditor", lambda w: [w.curation.pk], {}),
    ("curation_audit", "auditor", lambda w: [w.curation.pk], {"base": "1"}),
    ("curation_standardized", "auditor", lambda w: [w.curation.pk], {}),
    ("curation_vote", "auditor", lambda w: [w.curation.pk], {}),
    ("spectrum_list", "outsider", lambda w: [], {}),
    ("spectrum_detail", "outsider", lambda w: [w.spectrum.pk], {}),
    ("run_list", "outsider", lambda w: [], {}),
    ("run_detail", "outsider", lambda w: [w.run.pk], {}),
    ("candidate_live", "outsider", lambda w: [w.candidate.pk], {}),
    ("catalog_list", "outsider", lambda w: [], {}),
    ("catalog_detail", "outsider", lambda w: [w.entry.pk], {}),
    ("vetting_queue", "reviser", lambda w: [], {}),
    ("rating_campaigns", "auditor", lambda w: [], {}),
    ("rating_campaign", "staff", lambda w: [w.campaign.pk], {}),
    ("rating_rate", "auditor", lambda w: [w.open_campaign.pk], {}),
    ("rating_pairs", "auditor", lambda w: [w.open_campaign.pk], {}),
    ("rating_analysis", "auditor", lambda w: [w.campaign.pk], {}),
    ("rating_item", "auditor", lambda w: [w.campaign.pk, w.item.blind_id], {}),
    ("rating_judges", "staff", lambda w: [], {}),
]


@pytest.mark.parametrize(
    ("name", "who", "args", "query"),
    PAGES,
    ids=[f"{name}-{'-'.join(query.values()) or who}" for name, who, _, query in PAGES],
)
def test_it_shows_untrusted_text_escaped_never_raw(world, name, who, args, query):
    response = client_for(world, who).get(reverse(name, args=args(world)), query)
    body = response.content.decode()
    assert response.status_code == 200
    assert escape(world.text) in body  # the page does show it, as text
    for raw in RAW:
        assert raw not in body


def plot_json(body: str, element_id: str = "plot-data") -> dict:
    marker = f'id="{element_id}" type="application/json">'
    return json.loads(body.split(marker)[1].split("</script>")[0])


def test_it_keeps_untrusted_text_inert_inside_the_plot_data(world):
    body = client_for(world, "outsider").get(reverse("spectrum_detail", args=[world.spectrum.pk]))
    text = body.content.decode()
    plot = plot_json(text)
    assert plot["object_id"] == world.text
    # window labels are drawn by Plotly, so they arrive escaped for its pseudo-HTML
    assert any(plotly_text(world.text) in window["name"] for window in plot["windows"])
    for raw in RAW:
        assert raw not in text


def test_it_stores_an_uploaded_file_name_sanitized(world):
    name = f"{world.text}.csv"
    rows = "\n".join(f"{4000 + 10 * i},{1.0 + 0.01 * i}" for i in range(200))
    upload = SimpleUploadedFile(name, f"wavelength,flux\n{rows}\n".encode(), "text/csv")
    client = client_for(world, "outsider")
    client.post(reverse("spectrum_upload"), {"files": [upload], "dataset": "named"})
    row = Spectrum.objects.get(dataset="named")
    body = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert row.source_name == services.safe_file_name(name)
    assert row.source_name in body
    for raw in RAW:
        assert raw not in body


def test_it_names_a_refused_upload_without_its_markup(world):
    name = f"{world.text}.fits"
    upload = SimpleUploadedFile(name, b"<html><body>not a spectrum</body></html>", "text/html")
    response = client_for(world, "outsider").post(
        reverse("spectrum_upload"), {"files": [upload], "dataset": "refused"}
    )
    body = response.content.decode()
    assert "Nothing was stored" in body
    assert services.safe_file_name(name) in body
    for raw in RAW:
        assert raw not in body


def test_it_escapes_the_name_of_a_refused_trajectory_import(world):
    name = f"{world.text}.jsonl"
    upload = io.BytesIO(b'{"not": "a trajectory"}\n')
    upload.name = name
    response = client_for(world, "outsider").post(reverse("curation_import"), {"file": upload})
    body = response.content.decode()
    assert response.status_code == 400
    assert escape(Path(name).name) in body  # the browser sends no folders, "</" starts one
    for raw in RAW:
        assert raw not in body
