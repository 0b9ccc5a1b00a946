"""DatasetExport.curation_ids: the curations an export holds, for the blinding rule.

Earlier exports get theirs from their archive's trl.jsonl (read a line at a time); one whose
archive cannot be read keeps None, which the rule treats as holding any curation.
"""

import io
import json
import zipfile

from django.db import migrations, models


def _curation_ids(archive) -> list[int] | None:
    try:
        with archive.open("rb") as raw, zipfile.ZipFile(raw) as bundle:
            with bundle.open("trl.jsonl") as lines:
                ids = {
                    int(json.loads(line)["curation_id"])
                    for line in io.TextIOWrapper(lines, encoding="utf-8")
                    if line.strip()
                }
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
        return None
    return sorted(ids)


def record_curations(apps, schema_editor):
    DatasetExport = apps.get_model("annotation", "DatasetExport")
    for export in DatasetExport.objects.filter(curation_ids=None).iterator():
        if export.archive:
            export.curation_ids = _curation_ids(export.archive)
            export.save(update_fields=["curation_ids"])


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0016_result_storage"),
    ]

    operations = [
        migrations.AddField(
            model_name="datasetexport",
            name="curation_ids",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(record_curations, migrations.RunPython.noop),
    ]
