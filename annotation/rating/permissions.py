"""Who manages or rates a campaign, and who may see its analysis."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from rest_framework.request import Request

from annotation.core import permissions
from annotation.rating.models import (
    RatingCampaign,
)

# --- access -------------------------------------------------------------------------------------


def is_manager(campaign: RatingCampaign, user: Any) -> bool:
    """Staff run every campaign: close it, follow raters, start judges. Its creator no longer
    does once they lose the staff role (creating one needs it)."""
    return permissions.RATING_MANAGE.allows(user)


def is_rater(campaign: RatingCampaign, user: Any) -> bool:
    return campaign.raters.filter(pk=user.pk).exists()


def get_campaign_for_user(request: HttpRequest | Request, campaign_id: int) -> RatingCampaign:
    """The campaign, for its raters, its creator and staff. To anyone else it does not exist
    (404): an outsider learns nothing of it, open or closed."""
    campaign = get_object_or_404(RatingCampaign, pk=campaign_id)
    if not (is_manager(campaign, request.user) or is_rater(campaign, request.user)):
        raise Http404("no such campaign")
    return campaign


ANALYSIS_HIDDEN = (
    "The analysis shows every rater's scores and which model wrote each trajectory, so raters "
    "see it only once the campaign is closed."
)
