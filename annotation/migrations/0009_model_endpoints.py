"""Model endpoints registered by staff; runs and judges point at one.

Existing rows are linked by ``link_endpoints``: a run or judge that called the OPENAI_BASE_URL
endpoint now names "default" (its key is OPENAI_API_KEY, as before); one that called any other
URL gets a disabled endpoint named after that host, with no credential, so its provenance stays
visible and no key is ever sent there.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DEFAULT_ENDPOINT = "default"
RESERVED_NAMES = {"rule-based", "openai", "transformers", "vllm", "checkpoint", DEFAULT_ENDPOINT}


def _normalised(url: str | None) -> str:
    return (url or "").strip().rstrip("/")


def legacy_endpoint_name(base_url: str, taken: set[str]) -> str:
    """A free endpoint name after the URL's host (and port): "gpu-1-8000", "gpu-1-8000-2"."""
    parts = urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = (parts.hostname or "unknown").lower() + (f"-{port}" if port else "")
    stem = re.sub(r"[^a-z0-9._-]+", "-", host).strip("-._")[:50] or "unknown"
    name, number = stem, 2
    while name in taken or name in RESERVED_NAMES:
        name, number = f"{stem}-{number}", number + 1
    return name


def link_endpoints(apps: Any, schema_editor: Any) -> None:
    ModelEndpoint = apps.get_model("annotation", "ModelEndpoint")  # noqa: N806
    InspectionRun = apps.get_model("annotation", "InspectionRun")  # noqa: N806
    Judge = apps.get_model("annotation", "Judge")  # noqa: N806
    AuditLog = apps.get_model("annotation", "AuditLog")  # noqa: N806
    default_url = _normalised(settings.OPENAI_BASE_URL)

    def created(endpoint: Any, why: str) -> Any:
        AuditLog.objects.create(
            actor=None,
            action="endpoint_created",
            object_type="ModelEndpoint",
            object_pk=str(endpoint.pk),
            to_state="enabled" if endpoint.enabled else "disabled",
            comment=f"migration 0009: {why}",
            data={"base_url": endpoint.base_url, "model": endpoint.model},
        )
        return endpoint

    def endpoint_for(base_url: str | None, model: str) -> Any:
        url = _normalised(base_url) or default_url
        if not url:
            return None
        if url == default_url:
            endpoint = ModelEndpoint.objects.filter(name=DEFAULT_ENDPOINT).first()
            if endpoint is None:
                endpoint = created(
                    ModelEndpoint.objects.create(
                        name=DEFAULT_ENDPOINT,
                        base_url=default_url,
                        model=settings.OPENAI_MODEL or model or "unknown",
                        credential_env="OPENAI_API_KEY",
                        enabled=bool(settings.OPENAI_MODEL),
                    ),
                    "the OPENAI_* settings' endpoint",
                )
            return endpoint
        endpoint = (
            ModelEndpoint.objects.filter(
                base_url=url, model=model, credential_env="", credential_file="", enabled=False
            )
            .exclude(name=DEFAULT_ENDPOINT)
            .first()
        )
        if endpoint is None:
            taken = set(ModelEndpoint.objects.values_list("name", flat=True))
            endpoint = created(
                ModelEndpoint.objects.create(
                    name=legacy_endpoint_name(url, taken),
                    base_url=url[:500],
                    model=model or "unknown",
                    enabled=False,
                ),
                "a URL a run or judge called before endpoints were registered (no credential)",
            )
        return endpoint

    runs = InspectionRun.objects.filter(endpoint__isnull=True, policy_spec__kind="openai")
    for run in runs.order_by("pk"):
        spec = dict(run.policy_spec)
        endpoint = endpoint_for(spec.get("base_url"), str(spec.get("model") or ""))
        if endpoint is None:
            continue
        kept = {key: value for key, value in spec.items() if key not in ("base_url", "api_key")}
        run.policy_spec = {
            **kept,
            "endpoint": endpoint.name,
            "model": kept.get("model") or endpoint.model,
        }
        run.endpoint = endpoint
        run.save(update_fields=["policy_spec", "endpoint"])
    for judge in Judge.objects.filter(endpoint__isnull=True).order_by("pk"):
        judge.endpoint = endpoint_for(judge.base_url, judge.model)
        judge.save(update_fields=["endpoint"])


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0008_catalog_sort_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ModelEndpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=60, unique=True)),
                ("base_url", models.CharField(max_length=500)),
                ("model", models.CharField(max_length=200)),
                (
                    "credential_env",
                    models.CharField(
                        blank=True,
                        help_text="environment variable holding the API key",
                        max_length=100,
                    ),
                ),
                (
                    "credential_file",
                    models.CharField(
                        blank=True, help_text="secret file holding the API key", max_length=500
                    ),
                ),
                ("timeout", models.FloatField(default=60.0, help_text="seconds per request")),
                ("enabled", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.AddField(
            model_name="inspectionrun",
            name="endpoint",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="runs",
                to="annotation.modelendpoint",
            ),
        ),
        migrations.AddField(
            model_name="judge",
            name="endpoint",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="judges",
                to="annotation.modelendpoint",
            ),
        ),
        migrations.AlterField(
            model_name="judge",
            name="base_url",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.RunPython(link_endpoints, migrations.RunPython.noop),
    ]
