"""Upload handling that never keeps more of a file than the upload limit allows.

Django writes every uploaded byte to memory or a temporary file before a view can look at the
size, so a huge file would fill the disk before being refused. `SizeCappedUploadHandler` runs
first: past `SPECTRUM_UPLOAD_MAX_BYTES` it stops passing a file's bytes on, and hands the view an
empty `OversizedUpload` that still reports the real size, so the usual size check refuses it
with the usual message (file name, size, limit) and nothing of it is kept.
"""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler


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
