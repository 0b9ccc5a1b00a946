"""The home page: each signed-in user's pending work, counted across the domains.

It reads every domain's selectors, so it sits above them (like ``annotation/blinding.py``);
each count links to the page where that work is done and shows only for roles that do it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from annotation.catalog.queue import hidden_summary, vetter_queue_hidden, vetter_queue_rows
from annotation.core import permissions
from annotation.core.http import _expert
from annotation.core.models import Job, JobState
from annotation.core.permissions import require_role
from annotation.curation import selectors as curation_selectors
from annotation.learning.queue import waiting_count
from annotation.rating.models import PairJudgement, RatingAssignment
from annotation.spectra.models import Spectrum, Task

# (queue key, what it is, where it is done) for the "My work" queues, in pipeline order.
CURATION_WORK = (
    ("screening", "trajectories to screen", "curation_my_work"),
    ("revise", "revisions assigned to you", "curation_my_work"),
    ("claim_revision", "revisions nobody has claimed", "curation_my_work"),
    ("audit", "audits assigned to you", "curation_my_work"),
    ("claim_audit", "audits waiting for an auditor", "curation_my_work"),
    ("vote", "votes waiting for you", "curation_my_work"),
)
UNFINISHED_JOB_STATES = (JobState.QUEUED, JobState.RUNNING)


def pending_work(user: Any) -> list[dict[str, Any]]:
    """What waits for ``user``, one row per kind of work their roles do, with a link."""
    rows: list[dict[str, Any]] = []
    if permissions.CURATE.allows(user):
        queues = curation_selectors.curation_queues(user=user)
        for key, text, url in CURATION_WORK:
            rows.append({"text": text, "count": queues[key].count(), "url": reverse(url)})
    if permissions.VET.allows(user):
        rows.append(
            {
                "text": "candidates waiting for your vetting",
                "count": waiting_count(vetter_queue_rows(user)),
                "url": reverse("vetting_queue"),
                "hidden": hidden_summary(vetter_queue_hidden(user)),
            }
        )
    if permissions.RATE.allows(user):
        open_items = RatingAssignment.objects.filter(
            rater=user, score__isnull=True, item__campaign__closed=False
        ).count()
        open_pairs = PairJudgement.objects.filter(
            rater=user, outcome="", pair__campaign__closed=False
        ).count()
        url = reverse("rating_campaigns")
        rows.append({"text": "trajectories to rate", "count": open_items, "url": url})
        rows.append({"text": "pairs to compare", "count": open_pairs, "url": url})
    if permissions.JOBS_READ.allows(user):
        mine = Job.objects.filter(created_by=user, state__in=UNFINISHED_JOB_STATES)
        by_kind = dict(mine.values_list("kind").annotate(n=Count("id")).order_by())
        for kind, count in sorted(by_kind.items()):
            rows.append(
                {
                    "text": f"your {kind} jobs queued or running",
                    "count": count,
                    "url": reverse("job_list"),
                }
            )
    return rows


@require_role(permissions.SIGNED_IN)
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    counts = Spectrum.objects.order_by().values("dataset", "synthetic").annotate(n=Count("id"))
    return render(
        request,
        "annotation/home.html",
        {
            "dataset_counts": list(counts),
            "task_count": Task.objects.count(),
            "pending": pending_work(_expert(request)),
        },
    )
