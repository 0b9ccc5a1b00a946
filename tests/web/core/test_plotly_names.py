"""Names drawn by Plotly (trace names, categories, titles, annotations, hover text) are escaped.

Plotly renders those strings as its own pseudo-HTML: `<a href=...>` becomes a link, `<b>` bold,
and `%{...}` in a hover template pulls in data. The world is built with a link payload in every
name a user, a model or an expert gives (task windows, judges, policies, campaigns, raters), and
every figure's JSON must carry it escaped (charts.plotly_text), never raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from annotation.core.charts import analysis_chart_data, plotly_text
from tests.web.security_world import World, world_rolled_back

pytestmark = pytest.mark.django_db

LINK = '<a href="javascript:alert(1)">x</a>'


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        LINK, django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


def figure(world: World, who: str, url: str, element_id: str) -> dict:
    """The figure data a page hands its chart script (json_script)."""
    client = Client()
    client.force_login(world.users[who])
    body = client.get(url).content.decode()
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', body)
    assert found is not None, f"no {element_id} on {url}"
    return json.loads(unescape(found.group(1)))


def test_it_escapes_plotly_markup_and_template_fields():
    assert plotly_text(LINK) == '&lt;a href="javascript:alert(1)"&gt;x&lt;/a&gt;'
    assert plotly_text("%{y} & <b>") == "&#37;{y} &amp; &lt;b&gt;"
    assert plotly_text("model-a") == "model-a"


def test_it_escapes_window_labels_in_the_spectrum_plot(world):
    url = reverse("spectrum_detail", args=[world.spectrum.pk])
    plot = figure(world, "staff", url, "plot-data")
    assert plot["windows"]
    assert all(plotly_text(LINK) in window["name"] for window in plot["windows"])
    assert "<a href" not in json.dumps(plot["windows"])  # object_id is data, never drawn


def test_it_escapes_every_name_in_the_analysis_figures(world):
    url = reverse("rating_analysis", args=[world.campaign.pk])
    chart = figure(world, "staff", url, "analysis-data")
    escaped = plotly_text(LINK)
    assert escaped in chart["histograms"]  # the judge
    assert escaped in chart["spearman"]["names"]
    assert chart["pairwise"]["strengths"] and chart["pairwise"]["reference"]
    assert any(escaped in name for name in chart["pairwise"]["strengths"])  # the policy
    assert "<a href" not in json.dumps(chart)


def test_it_escapes_the_dataset_and_policy_names_of_the_pairwise_chart():
    analysis = {
        "histograms": {LINK: [1, 0, 0, 0, 0, 0]},
        "cdfs": {LINK: [1, 1, 1, 1, 1, 1]},
        "spearman": {"names": [LINK], "matrix": [[1.0]]},
        "pairwise": {
            "reference": LINK,
            "policies": [LINK, "b"],
            "shares": {LINK: {"win": 1.0, "tie": 0.0, "loss": 0.0, "n": 1}},
            "strengths": {LINK: {"estimate": 1.0, "low": 0.5, "high": 2.0}},
        },
    }
    chart = json.dumps(analysis_chart_data(analysis))
    assert "<a href" not in chart
    assert chart.count(json.dumps(plotly_text(LINK))[1:-1]) == 7
