"""The project's private temporary folder, made before anything (Django's checks included)
looks for it."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeTempDir(RuntimeError):
    pass


def private_temp_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if missing and return it.

    The default lies in a shared /tmp under a name anyone can guess, so an existing one is
    used only if it is a real folder (not a link) owned by this user and closed to others:
    otherwise another account could read uploads and exports, or plant files in it.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeTempDir(f"SPECVET_TEMP_DIR {path} is not a folder (a link or a file)")
    if info.st_uid != os.getuid():
        raise UnsafeTempDir(
            f"SPECVET_TEMP_DIR {path} belongs to user id {info.st_uid}, not to this user "
            f"({os.getuid()}); remove it or set SPECVET_TEMP_DIR to a folder of your own"
        )
    if info.st_mode & 0o077:
        path.chmod(0o700)
    return path
