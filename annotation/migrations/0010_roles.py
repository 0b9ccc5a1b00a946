"""The four group roles (annotation/roles.py) with the model permissions the admin uses.

The app enforces roles by group membership (annotation/permissions.py); these Django permissions
decide what a member may see or change in the admin, once staff let them in there. The staff role
is ``is_staff`` and has no group.
"""

from __future__ import annotations

from django.db import migrations

VIEW_CATALOG = ["view_spectrum", "view_task", "view_catalogentry"]

GROUP_PERMISSIONS: dict[str, list[str]] = {
    "viewer": VIEW_CATALOG,
    "expert": [
        *VIEW_CATALOG,
        "add_spectrum",
        "view_curation",
        "change_curation",
        "view_trajectoryversion",
        "add_trajectoryversion",
        "view_audit",
        "add_audit",
        "view_vote",
        "add_vote",
        "view_expertdecision",
        "add_expertdecision",
        "change_expertdecision",
        "view_inspectionrun",
        "view_candidate",
    ],
    "rater": [
        "view_ratingcampaign",
        "view_campaignitem",
        "view_ratingassignment",
        "change_ratingassignment",
        "view_pairjudgement",
        "change_pairjudgement",
    ],
    "ml_engineer": [
        *VIEW_CATALOG,
        "add_spectrum",
        "view_job",
        "add_job",
        "change_job",
        "view_curation",
        "add_curation",
        "view_datasetexport",
        "add_datasetexport",
        "view_inspectionrun",
        "add_inspectionrun",
        "change_inspectionrun",
        "view_candidate",
        "view_rollout",
        "view_trainingrun",
        "add_trainingrun",
        "change_trainingrun",
        "view_trainingmetric",
        "view_policycheckpoint",
        "add_policycheckpoint",
    ],
}


def create_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after the last migration; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        found = Permission.objects.filter(
            content_type__app_label="annotation", codename__in=codenames
        )
        missing = sorted(set(codenames) - set(found.values_list("codename", flat=True)))
        if missing:
            raise RuntimeError(f"group {name}: no such permissions {missing}")
        group.permissions.add(*found)


def delete_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUP_PERMISSIONS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0009_model_endpoints"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, delete_groups)]
