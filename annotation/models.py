"""Every model of the one app label "annotation", re-exported from the domain that owns it.

Migrations and the app label stay put: Django finds the models through this module; code
imports them from here or from their domain's ``models``.
"""

from __future__ import annotations

from annotation.core.models import (
    ApiTokenOrigin,
    AuditLog,
    AuditLogQuerySet,
    ImageBlob,
    Job,
    JobState,
    ModelEndpoint,
)
from annotation.curation.models import (
    Audit,
    AuditVerdict,
    Curation,
    CurationState,
    DatasetExport,
    RevisionDraft,
    TrajectoryVersion,
    VersionKind,
    Vote,
    VoteValue,
)
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
    LiveStep,
    ModelPromotion,
    Rollout,
)
from annotation.learning.models import (
    AuditSample,
    AuditSampleItem,
    CalibrationFit,
    GoldAnswer,
    GoldItem,
    TriageTarget,
    TriageThreshold,
)
from annotation.rating.models import (
    CampaignItem,
    Judge,
    JudgeScore,
    PairItem,
    PairJudgement,
    PairOutcome,
    RatingAssignment,
    RatingCampaign,
)
from annotation.spectra.models import (
    Label,
    LabelExport,
    RedshiftDecision,
    RedshiftSource,
    Spectrum,
    SpectrumLabel,
    Task,
)
from annotation.training_runs.models import (
    PolicyCheckpoint,
    TrainingMetric,
    TrainingRun,
    TrainingStage,
)

__all__ = [
    "ApiTokenOrigin",
    "AuditLogQuerySet",
    "AuditLog",
    "JobState",
    "Job",
    "ImageBlob",
    "ModelEndpoint",
    "Task",
    "Label",
    "LabelExport",
    "RedshiftDecision",
    "RedshiftSource",
    "Spectrum",
    "SpectrumLabel",
    "CurationState",
    "Curation",
    "VersionKind",
    "TrajectoryVersion",
    "RevisionDraft",
    "AuditVerdict",
    "Audit",
    "VoteValue",
    "Vote",
    "DatasetExport",
    "TrainingStage",
    "TrainingRun",
    "TrainingMetric",
    "PolicyCheckpoint",
    "InspectionRun",
    "CandidateState",
    "Candidate",
    "Rollout",
    "LiveStep",
    "ExpertDecisionValue",
    "ExpertDecision",
    "CatalogEntry",
    "ModelPromotion",
    "RatingCampaign",
    "CampaignItem",
    "RatingAssignment",
    "PairOutcome",
    "PairItem",
    "PairJudgement",
    "Judge",
    "JudgeScore",
    "CalibrationFit",
    "TriageTarget",
    "TriageThreshold",
    "AuditSample",
    "AuditSampleItem",
    "GoldItem",
    "GoldAnswer",
]
