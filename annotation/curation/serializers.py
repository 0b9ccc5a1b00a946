"""Output serializers of the curation APIs."""

from __future__ import annotations

from rest_framework import serializers

from annotation.core.serializers import _username
from annotation.curation.models import (
    Audit,
    Curation,
    DatasetExport,
    TrajectoryVersion,
    Vote,
)
from annotation.spectra.models import Task

# --- output serializers ---------------------------------------------------------------------


class CurationOutputSerializer(serializers.ModelSerializer):
    task: serializers.SlugRelatedField[Task] = serializers.SlugRelatedField(
        slug_field="code", read_only=True
    )
    spectrum_object_id = serializers.CharField(source="spectrum.object_id", read_only=True)
    reviser = _username()
    auditor_1 = _username()
    auditor_2 = _username()

    class Meta:
        model = Curation
        fields = [
            "id",
            "task",
            "spectrum",
            "spectrum_object_id",
            "ground_truth",
            "state",
            "audit_round",
            "head_number",
            "reviser",
            "auditor_1",
            "auditor_2",
            "source",
            "teacher",
            "draft_job",
            "created_at",
            "updated_at",
        ]


class VersionOutputSerializer(serializers.ModelSerializer):
    author = _username()
    trajectory = serializers.JSONField(source="data", help_text="PNGs as png_sha256 references")

    class Meta:
        model = TrajectoryVersion
        fields = ["number", "kind", "author", "comment", "created_at", "trajectory"]


class AuditOutputSerializer(serializers.ModelSerializer):
    auditor = _username()

    class Meta:
        model = Audit
        fields = [
            "round",
            "version_number",
            "auditor",
            "verdict",
            "comment",
            "step_comments",
            "created_at",
        ]


class VoteOutputSerializer(serializers.ModelSerializer):
    voter = _username()

    class Meta:
        model = Vote
        fields = ["voter", "value", "comment", "created_at"]


class ExportOutputSerializer(serializers.ModelSerializer):
    created_by = _username()

    class Meta:
        model = DatasetExport
        fields = ["id", "version", "content_hash", "manifest", "created_by", "created_at"]
