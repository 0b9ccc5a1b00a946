from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)


def test_it_sends_a_content_security_policy_without_inline_scripts_or_eval(expert_client):
    policy = expert_client.get(reverse("home"))["Content-Security-Policy"]
    script_src = next(part for part in policy.split(";") if "script-src" in part)
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    assert "frame-ancestors 'none'" in policy


@pytest.mark.parametrize(
    "name", ["home", "spectrum_list", "spectrum_upload", "run_list", "run_create"]
)
def test_it_renders_pages_without_inline_scripts(expert_client, name):
    body = expert_client.get(reverse(name)).content.decode()
    assert not INLINE_SCRIPT.search(body)
    assert " on" + "click=" not in body.lower()


def test_it_renders_the_spectrum_page_without_inline_scripts(expert_client):
    row = make_spectrum()
    body = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert not INLINE_SCRIPT.search(body)
    assert "onchange=" not in body.lower()
