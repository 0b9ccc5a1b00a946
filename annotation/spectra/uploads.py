"""Upload handling that never keeps more of a file than the upload limit allows.

Django writes every uploaded byte to memory or a temporary file before a view can look at the
size, so a huge file would fill the disk before being refused. `SizeCappedUploadHandler` runs
first: past `SPECTRUM_UPLOAD_MAX_BYTES` it stops passing a file's bytes on, and hands the view an
empty `OversizedUpload` that still reports the real size, so the usual size check refuses it
with the usual message (file name, size, limit) and nothing of it is kept.

`CleanedTemporaryFileUploadHandler` and `UploadTemporaryFilesMiddleware` delete every temporary
upload file when its request ends, including those Django never hands to the view: a file refused
by the size cap, or one cut off when the client disconnects or a handler raises mid-body.
`read_limits` turns the SPECTRUM_MAX_* settings into the limits agent.spectra reads under.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, TemporaryFileUploadHandler
from django.http import HttpRequest, HttpResponse

from agent.spectra import ReadLimits
from annotation.core.tempfiles import temp_dir

_TEMPORARY_FILES = "_specvet_temporary_uploads"


def read_limits() -> ReadLimits:
    """What reading one uploaded or loaded survey file may cost (webapp/settings.py)."""
    return ReadLimits(
        max_uncompressed_bytes=settings.SPECTRUM_MAX_UNCOMPRESSED_BYTES,
        max_pixels=settings.SPECTRUM_MAX_PIXELS,
        max_spectra=settings.SPECTRUM_MAX_SPECTRA_PER_FILE,
    )


class OversizedUpload(UploadedFile):
    """A file that was over the limit: its name and real size, none of its content."""

    def __init__(self, *, name: str, content_type: str, size: int, charset: str | None) -> None:
        super().__init__(io.BytesIO(), name, content_type, size, charset)


class SizeCappedUploadHandler(FileUploadHandler):
    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self.over_limit = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        if start + len(raw_data) > settings.SPECTRUM_UPLOAD_MAX_BYTES:
            self.over_limit = True
        # None keeps the chunk from the handlers after this one (memory, temporary file).
        return None if self.over_limit else raw_data

    def file_complete(self, file_size: int) -> UploadedFile | None:
        if not self.over_limit:
            return None  # the next handler builds the file as usual
        return OversizedUpload(
            name=self.file_name or "upload",
            content_type=self.content_type or "application/octet-stream",
            size=file_size,
            charset=self.charset,
        )


class CleanedTemporaryFileUploadHandler(TemporaryFileUploadHandler):
    """Django's temporary-file handler, recording each file it opens on the request so that
    UploadTemporaryFilesMiddleware can delete it whatever became of the upload."""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        temp_dir()  # FILE_UPLOAD_TEMP_DIR: Django does not create it
        super().new_file(*args, **kwargs)
        if self.request is not None:
            opened = self.request.__dict__.setdefault(_TEMPORARY_FILES, [])
            opened.append(self.file)


def discard_temporary_uploads(request: HttpRequest) -> None:
    """Close, and so delete, every temporary upload file the request opened."""
    for upload in request.__dict__.pop(_TEMPORARY_FILES, []):
        upload.close()


class UploadTemporaryFilesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        finally:
            discard_temporary_uploads(request)
