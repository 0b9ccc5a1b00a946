"""The revision editor shows the whole spectrum with each step's window (issue 15)."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from tests.factories import UserFactory, make_curation
from tests.web.curation.test_views import client_for, in_revision

pytestmark = pytest.mark.django_db


def test_it_plots_the_whole_spectrum_with_each_step_window(auditor) -> None:
    reviser = UserFactory(username="reviser", roles=["expert"])
    curation = in_revision(make_curation(), reviser, auditor)
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content.decode()
    assert 'id="editor-spectrum"' in body and 'data-viewer-for="spectrum-plot"' in body
    data = json.loads(re.search(r'id="plot-data" type="application/json">(.*?)</script>', body)[1])
    assert data["inspected"] == [[6500.0, 6630.0]]  # the one step's window (make_trajectory)
    assert len(data["wavelength"]) > 100  # the whole spectrum, not the step's window


def test_it_leaves_the_plot_out_of_the_editor_partial(auditor) -> None:
    reviser = UserFactory(username="reviser", roles=["expert"])
    curation = in_revision(make_curation(), reviser, auditor)
    partial = client_for(reviser).get(
        reverse("curation_revise", args=[curation.pk]), HTTP_HX_REQUEST="true"
    )
    assert 'id="editor-spectrum"' not in partial.content.decode()
