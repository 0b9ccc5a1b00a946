"""The quality flag an expert gives with a vetting decision: a 0-4 quality, issue flags and a
comment. Plain data (no database), shared by the service, the queue page, the API and the docs.

The 0-4 scale is DESI's visual-inspection quality as Prospect records it (Lan et al. 2023;
MARZ's QOP 1-4 reads the same way), said of the expert's YES/NO instead of a redshift: how
securely the spectrum supports the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from annotation.core.errors import WorkflowError

QUALITY_SCALE: tuple[tuple[int, str, str], ...] = (
    (4, "confident", "two or more secure features decide it"),
    (3, "probable", "one secure feature, or several weaker ones, decide it"),
    (2, "possible", "one feature points to it, but it could be something else"),
    (1, "unlikely", "some signal, too weak or unclear to decide on"),
    (0, "nothing", "no usable signal: the data cannot support a decision"),
)
QUALITY_VALUES = tuple(value for value, _, _ in QUALITY_SCALE)


@dataclass(frozen=True)
class IssueFlag:
    code: str  # stored and exported
    label: str
    key: str  # the queue page's one-key toggle (keys.js); not one of Y N U S Z or 0-4


ISSUE_FLAGS: tuple[IssueFlag, ...] = (
    IssueFlag("sky", "bad sky subtraction", "b"),
    IssueFlag("low_snr", "low S/N", "w"),
    IssueFlag("artefact", "artefact or cosmic ray", "c"),
    IssueFlag("extraction", "wrong extraction or blend", "x"),
    IssueFlag("calibration", "flux or wavelength calibration problem", "f"),
    IssueFlag("other", "other (say what in the comment)", "o"),
)
ISSUE_CODES = tuple(flag.code for flag in ISSUE_FLAGS)
COMMENT_MAX_CHARS = 2000


def checked_quality(value: int | str | None) -> int | None:
    """The quality as stored: None when not given; raises WorkflowError outside 0-4."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise WorkflowError(f"quality must be a whole number 0-4; got {value[:20]!r}")
        value = int(value.strip())
    if value not in QUALITY_VALUES:
        raise WorkflowError(f"quality must be 0-4; got {value}")
    return value


def checked_issues(codes: Iterable[str]) -> list[str]:
    """The issue flags as stored (known codes, in the scale's order, once each)."""
    given = {code.strip() for code in codes if code.strip()}
    unknown = sorted(given - set(ISSUE_CODES))
    if unknown:
        raise WorkflowError(
            f"issues must be among {', '.join(ISSUE_CODES)}; got {', '.join(unknown)[:80]!r}"
        )
    return [code for code in ISSUE_CODES if code in given]


def checked_comment(comment: str) -> str:
    comment = comment.strip()
    if len(comment) > COMMENT_MAX_CHARS:
        raise WorkflowError(
            f"comment: at most {COMMENT_MAX_CHARS:,} characters; this one has "
            f"{len(comment):,}. Shorten it and decide again."
        )
    return comment


def mean_quality(values: Iterable[int | None]) -> float | None:
    given = [value for value in values if value is not None]
    return round(sum(given) / len(given), 3) if given else None


def joined_issues(flag_lists: Iterable[Iterable[str]]) -> str:
    """Every flag any expert raised, comma-separated in the scale's order (the catalog column)."""
    raised = {code for flags in flag_lists for code in flags}
    return ",".join(code for code in ISSUE_CODES if code in raised)
