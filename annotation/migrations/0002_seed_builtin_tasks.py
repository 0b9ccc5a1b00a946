from __future__ import annotations

from django.db import migrations


def seed(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agent.inspection_tasks import all_tasks, task_to_dict

    task_model = apps.get_model("annotation", "Task")
    for value in all_tasks():
        data = task_to_dict(value)
        task_model.objects.update_or_create(
            code=value.code,
            defaults={
                "name": data["name"],
                "question": data["question"],
                "guideline": data["guideline"],
                "windows": data["windows"],
                "contaminants": data["contaminants"],
                "builtin": True,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("annotation", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
