"""Blinding on the vetting loop's pages: an expert who rates an open campaign (erin) sees no
model behind its items on the calibration page or API, and is never served a gold item from a
run hidden from her (the world of tests/web/core/test_blinding.py)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.inspections.models import InspectionRun
from annotation.learning import queue, services
from annotation.spectra.models import SpectrumLabel, Task
from tests.web.core.test_blinding import client_for, world  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def name_models(world) -> None:  # noqa: F811
    for run in ("run-alpha", "run-gamma"):
        key = f"model:{run}"
        InspectionRun.objects.filter(pk=world.runs[run].pk).update(
            model_key=key, model_label=f"label {run}"
        )


def test_it_lists_no_hidden_model_on_the_calibration_page_or_api(world):  # noqa: F811
    name_models(world)
    for name, url in (
        ("calibration", f"{reverse('calibration')}?task=CV"),
        ("api_calibration_detail", reverse("api_calibration_detail", args=["CV"])),
    ):
        erin = client_for(world, "erin", name).get(url).content.decode()
        mel = client_for(world, "mel", name).get(url).content.decode()
        assert "model:run-gamma" in erin and "model:run-alpha" not in erin, name
        assert "model:run-alpha" in mel, name


def test_it_serves_no_gold_item_from_a_hidden_run(world, monkeypatch):  # noqa: F811
    alpha = world.candidate("run-alpha")
    SpectrumLabel.objects.create(
        spectrum_id=alpha.spectrum_id, task=Task.objects.get(code="CV"), state="agreed", value="YES"
    )
    services.gold_item_mark(candidate=alpha, actor=world.users["stella"])
    monkeypatch.setattr(queue, "gold_rate", lambda record: 1.0)  # gold whenever one is there
    client = client_for(world, "erin", "api_vetting_next")
    served = client.get(reverse("api_vetting_next")).json()["candidate"]
    assert served["id"] == world.candidate("run-gamma").pk
    mel_expert = world.users["mel"]
    assert queue.gold_candidates(mel_expert).filter(pk=alpha.pk).exists()  # it is a gold item
