"""A run's policy spec is checked key by key at creation, for every kind.

Before, a rule-based spec with an unknown key (``{"foo": 1}``, ``"version": "v2"``) or a bad
value (``"max_windows": -5``) was stored (201) and every candidate then failed when its policy
was built. Now the API answers 400 naming the key and why, and nothing is stored."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agent.policies import build_policy
from annotation.core.errors import WorkflowError
from annotation.inspections.models import InspectionRun
from annotation.inspections.run_policies import MAX_WINDOWS, policy_spec_check
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


def create_run(user, policy):
    client = APIClient()
    client.force_authenticate(user)
    body = {"task": "CV", "spectrum_ids": [make_spectrum().pk], "policy": policy}
    return client.post(reverse("api_run_create"), body, format="json")


@pytest.mark.parametrize(
    ("spec", "named", "why"),
    [
        ({"kind": "rule-based", "foo": 1}, "'foo'", "allowed: kind, threshold, max_windows"),
        ({"kind": "rule-based", "version": "v2"}, "'version'", "not accepted"),
        ({"kind": "rule-based", "max_windows": -5}, "'max_windows'", f"0 to {MAX_WINDOWS}"),
        ({"kind": "rule-based", "max_windows": 17}, "'max_windows'", f"0 to {MAX_WINDOWS}"),
        ({"kind": "rule-based", "max_windows": 2.5}, "'max_windows'", "integer"),
        ({"kind": "rule-based", "max_windows": True}, "'max_windows'", "integer"),
        ({"kind": "rule-based", "threshold": 1.5}, "'threshold'", "between 0 and 1"),
        ({"kind": "rule-based", "threshold": "0.5"}, "'threshold'", "number"),
        ({"kind": "rule-based", "name": ""}, "'name'", "non-empty"),
        ({"kind": "rule-based", "name": "x" * 121}, "'name'", "120 characters"),
        ({"kind": "rule-based", "calibration": {"CV": 1}}, "'calibration'", '"default"'),
        ({"kind": "rule-based", "sampling": {}}, "'sampling'", "beside the policy"),
    ],
)
def test_it_refuses_a_rule_based_spec_naming_the_key(ml_engineer, spec, named, why):
    response = create_run(ml_engineer, spec)
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert named in detail and why in detail, detail
    assert not InspectionRun.objects.exists()


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "rule-based"},
        {"kind": "rule-based", "threshold": 0.7, "max_windows": 3},
        {"kind": "rule-based", "max_windows": None, "name": "strict", "calibration": None},
        {"kind": "rule-based", "max_windows": 0, "calibration": "default"},
    ],
)
def test_it_stores_a_rule_based_spec_the_inspector_is_built_from(ml_engineer, spec):
    response = create_run(ml_engineer, spec)
    assert response.status_code == 201, response.content
    stored = InspectionRun.objects.get().policy_spec
    assert stored == spec
    assert build_policy(stored).info()["kind"] == "rule-based"  # what every candidate does


@pytest.fixture
def checkpoint_folder(settings, tmp_path):
    settings.POLICY_CHECKPOINT_ROOTS = [str(tmp_path)]
    return str(tmp_path / "ckpt")


@pytest.mark.parametrize(
    ("extra", "named", "why"),
    [
        ({"device": "tpu"}, "'device'", '"cpu", "cuda", "cuda:N" or "mps"'),
        ({"dtype": "float8"}, "'dtype'", "float32, float16, bfloat16"),
        ({"max_pixels": 0}, "'max_pixels'", "integer from 784"),
        ({"reuse_cache": "yes"}, "'reuse_cache'", "true or false"),
        ({"version": "v2"}, "'version'", "allowed: kind, model_path, device"),
        ({"base_url": "http://x"}, "base_url", "takes no base_url"),
    ],
)
def test_it_refuses_a_local_checkpoint_spec_naming_the_key(
    ml_engineer, checkpoint_folder, extra, named, why
):
    response = create_run(
        ml_engineer, {"kind": "transformers", "model_path": checkpoint_folder, **extra}
    )
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert named in detail and why in detail, detail


def test_it_accepts_a_local_checkpoint_spec_with_its_settings(ml_engineer, checkpoint_folder):
    spec = {
        "kind": "transformers",
        "model_path": checkpoint_folder,
        "device": "cuda:0",
        "dtype": "bfloat16",
        "max_pixels": 200_704,
        "reuse_cache": False,
    }
    stored, endpoint = policy_spec_check(spec, user=ml_engineer)
    assert stored == spec and endpoint is None


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"kind": "openai", "endpoint": "default", "version": "v2"}, "['version']"),
        ({"kind": "oracle"}, "policy kind"),
        (["rule-based"], "must be an object"),
    ],
)
def test_it_refuses_an_endpoint_spec_or_an_unknown_kind(ml_engineer, spec, named):
    """An endpoint's spec has had its own check (tests/web/core/test_endpoints.py)."""
    with pytest.raises(WorkflowError, match=named.replace("[", r"\[").replace("]", r"\]")):
        policy_spec_check(spec, user=ml_engineer)
