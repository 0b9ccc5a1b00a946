"""kombu's filesystem transport with messages that appear whole (the embedded default's broker).

kombu 5.7's filesystem channel creates a message file, then locks and writes it; its reader
renames and reads a file without taking that lock. A worker polling while a message is written
(by one of its own threads sending a task, the web process, or ``resend_unfinished``) can read
an empty file, and ``json.loads`` of it stops the worker ("Unrecoverable error:
JSONDecodeError"), which a clean-clone test run showed. Here a message is written under a name
the reader skips and renamed into place once complete: a rename within one folder is atomic, so
the reader finds no file or the whole message.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

PARTIAL_SUFFIX = ".partial"


def message_name(queue: str) -> str:
    """kombu's file name for a message: the reader takes ``*.<queue>.msg`` in name order."""
    return f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    # kombu's filesystem channel names the argument "payload", its base "message": this keeps
    # the filesystem channel's signature, which its base's does not admit.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = message_name(queue)
        final = os.path.join(self.data_folder_out, name)
        # A leading dot and a suffix: the reader's "<anything>.<queue>.msg" never matches it.
        partial = os.path.join(self.data_folder_out, f".{name}{PARTIAL_SUFFIX}")
        try:
            with open(partial, "wb") as written:
                written.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as error:
            raise ChannelError(f"Cannot add file {final!r} to directory") from error


class Transport(filesystem.Transport):
    Channel = Channel
