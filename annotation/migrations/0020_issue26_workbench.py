# Issue 26: each catalog entry names its stored spectrum, data set, IAU designation and content
# hash, so the same file in several data sets is told apart and grouped; existing entries are
# filled from their candidate's spectrum.
from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

from agent.spectra.value import iau_designation

BATCH = 2000


def fill_from_spectra(apps, schema_editor):
    entry_model = apps.get_model("annotation", "CatalogEntry")
    rows = (
        entry_model.objects.filter(candidate__isnull=False, spectrum__isnull=True)
        .select_related("candidate__spectrum")
        .order_by("id")
    )
    batch = []
    for entry in rows.iterator(chunk_size=BATCH):
        spectrum = entry.candidate.spectrum
        entry.spectrum_id = spectrum.pk
        entry.dataset = spectrum.dataset
        entry.designation = iau_designation(spectrum.ra, spectrum.dec)
        entry.content_hash = spectrum.content_hash
        batch.append(entry)
        if len(batch) >= BATCH:
            entry_model.objects.bulk_update(
                batch, ["spectrum", "dataset", "designation", "content_hash"]
            )
            batch = []
    if batch:
        entry_model.objects.bulk_update(
            batch, ["spectrum", "dataset", "designation", "content_hash"]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0019_token_origin_audit_truncate"),
    ]

    operations = [
        migrations.AddField(
            model_name="catalogentry",
            name="content_hash",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AddField(
            model_name="catalogentry",
            name="dataset",
            field=models.CharField(blank=True, db_default="", default="", max_length=80),
        ),
        migrations.AddField(
            model_name="catalogentry",
            name="designation",
            field=models.CharField(blank=True, db_default="", default="", max_length=24),
        ),
        migrations.AddField(
            model_name="catalogentry",
            name="spectrum",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="annotation.spectrum",
            ),
        ),
        migrations.AddIndex(
            model_name="catalogentry",
            index=models.Index(fields=["content_hash"], name="catalog_content_hash"),
        ),
        migrations.RunPython(fill_from_spectra, migrations.RunPython.noop),
    ]
