"""Expert rating (paper section 4.5, appendix G): campaigns, scores, pairs, judges."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from annotation.core.models import ModelEndpoint
from annotation.spectra.models import Spectrum, Task

# --- expert rating (paper section 4.5, appendix G) ------------------------------------------------


class RatingCampaign(models.Model):
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    raters_per_item = models.PositiveSmallIntegerField(default=2)
    raters = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="rating_campaigns")
    closed = models.BooleanField(default=False)
    seed = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name


class CampaignItem(models.Model):
    """A frozen copy of one trajectory to rate; raters see only its blind id."""

    campaign = models.ForeignKey(RatingCampaign, on_delete=models.CASCADE, related_name="items")
    blind_id = models.CharField(max_length=16)
    data = models.JSONField()  # trajectory dict, PNGs as blob hashes
    policy_name = models.CharField(max_length=120)  # hidden from raters until the analysis
    source = models.CharField(max_length=80)  # "rollout:12", "curation:3@v4", "import:file#2"
    dataset = models.CharField(max_length=80, blank=True)  # survey or data set, for breakdowns
    task = models.ForeignKey(Task, on_delete=models.PROTECT)
    spectrum = models.ForeignKey(Spectrum, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["campaign", "id"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "blind_id"], name="blind_id_unique"),
            models.UniqueConstraint(fields=["campaign", "source"], name="item_source_unique"),
        ]


class RatingAssignment(models.Model):
    item = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="assignments")
    rater = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()  # the rater's own random order
    score = models.PositiveSmallIntegerField(null=True, blank=True)
    comment = models.TextField(blank=True)
    rated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rater", "position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "rater"], name="one_assignment_per_rater"),
            models.CheckConstraint(
                condition=models.Q(score__isnull=True) | models.Q(score__lte=5),
                name="score_0_to_5",
            ),
        ]


class PairOutcome(models.TextChoices):
    LEFT = "left", "left better"
    TIE = "tie", "tie"
    RIGHT = "right", "right better"


class PairItem(models.Model):
    """Two trajectories for the same spectrum from two policies; sides drawn at random."""

    campaign = models.ForeignKey(RatingCampaign, on_delete=models.CASCADE, related_name="pairs")
    left = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="+")
    right = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="+")
    dataset = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["campaign", "id"]


class PairJudgement(models.Model):
    pair = models.ForeignKey(PairItem, on_delete=models.CASCADE, related_name="judgements")
    rater = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()
    outcome = models.CharField(max_length=5, choices=PairOutcome.choices, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rater", "position"]
        constraints = [
            models.UniqueConstraint(fields=["pair", "rater"], name="one_judgement_per_rater")
        ]


class Judge(models.Model):
    """An LLM judge: a registered model endpoint and a rubric prompt."""

    name = models.CharField(max_length=80, unique=True)
    # Null only for a judge whose endpoint went missing; calls always go to this endpoint.
    endpoint = models.ForeignKey(
        ModelEndpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="judges"
    )
    # Provenance snapshots taken at creation; never used to make a call.
    base_url = models.CharField(max_length=500, blank=True)
    model = models.CharField(max_length=200)
    prompt = models.TextField(help_text="The rubric prompt (paper Table 7)")
    include_images = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class JudgeScore(models.Model):
    judge = models.ForeignKey(Judge, on_delete=models.PROTECT, related_name="scores")
    item = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="judge_scores")
    score = models.PositiveSmallIntegerField(null=True, blank=True)  # None: no valid score given
    reason = models.TextField(blank=True)
    raw = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["judge", "item"], name="one_score_per_judge_and_item")
        ]
