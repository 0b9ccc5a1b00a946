"""The one error vocabulary of specvet's services, and the one mapping of it to HTTP status.

Services raise these with a message a user can act on; pages (``http_status``) and APIs
(``core.apis.error_response``) answer with the same status for the same refusal:
NotAllowed 403, WrongState and VersionConflict 409, any other WorkflowError 400.
"""

from __future__ import annotations


class UploadRejected(ValueError):
    """An upload refused before reading: too large, too many files, empty."""


class WorkflowError(Exception):
    """An action the rules refuse; the message says which rule."""


class FieldRefused(WorkflowError):
    """A value refused for one named input; ``field`` names it as the caller gave it, so a form
    shows ``reason`` under that field with the field's own label (issue 37: the training form
    said "model_path" beside a field labelled "Base model")."""

    def __init__(self, *, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field = field
        self.reason = reason


class NotAllowed(WorkflowError):
    """The user has no right to this action on this object (role or separation of duties)."""


class WrongState(WorkflowError):
    """The object is not in a state where this action applies (perhaps someone else moved it)."""


class VersionConflict(WorkflowError):
    """A save based on a version that is no longer the latest; nothing was saved."""

    def __init__(self, *, base: int, head: int) -> None:
        super().__init__(
            f"this edit is based on version {base}, but version {head} has been saved since; "
            "reload to see it, then apply your changes again (your text is kept in the form)"
        )
        self.base = base
        self.head = head


def http_status(error: WorkflowError) -> int:
    """The HTTP status for a refused action, the same for pages and APIs."""
    if isinstance(error, NotAllowed):
        return 403
    if isinstance(error, WrongState | VersionConflict):
        return 409
    return 400


def error_body(error: WorkflowError) -> dict[str, object]:
    """What an API answers for a refused action: the message, and the head a stale save missed."""
    body: dict[str, object] = {"detail": str(error)}
    if isinstance(error, VersionConflict):
        body["head"] = error.head
    return body
