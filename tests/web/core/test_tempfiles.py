"""What a killed process leaves in SPECVET_TEMP_DIR is swept; what a live one writes is kept."""

from __future__ import annotations

import os
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.core.tempfiles import sweep_stale_temp_files, temp_dir

HOUR = 3600.0


@pytest.fixture
def temp_root(settings, tmp_path):
    settings.SPECVET_TEMP_DIR = tmp_path / "specvet-temp"
    settings.FILE_UPLOAD_TEMP_DIR = str(settings.SPECVET_TEMP_DIR)
    return settings.SPECVET_TEMP_DIR


def _age(path, hours: float) -> None:
    stamp = time.time() - hours * HOUR
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (stamp, stamp), follow_symlinks=False)


def test_it_removes_what_is_older_than_the_limit_and_keeps_the_rest(temp_root):
    root = temp_root
    root.mkdir()
    stale_dir = root / "specvet-upload-abc"
    (stale_dir / "0").mkdir(parents=True)
    (stale_dir / "0" / "spec.fits").write_bytes(b"x" * 1000)
    stale_file = root / "tmpq1w2.upload.fits"
    stale_file.write_bytes(b"y" * 500)
    live_dir = root / "specvet-import-def"
    live_dir.mkdir()
    (live_dir / "train.json").write_bytes(b"[]")
    _age(stale_dir, 7)
    _age(stale_file, 7)
    _age(live_dir, 7)
    (live_dir / "images").mkdir()  # still being written: a fresh entry inside an old folder
    swept = sweep_stale_temp_files()
    assert (swept.removed, swept.freed_bytes, swept.kept) == (2, 1500, 1)
    assert sorted(p.name for p in root.iterdir()) == ["specvet-import-def"]


def test_it_never_follows_a_link_out_of_the_folder(temp_root, tmp_path):
    temp_root.mkdir()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    link = temp_root / "link"
    link.symlink_to(outside)
    _age(outside, 10)
    os.utime(link, (time.time() - 10 * HOUR,) * 2, follow_symlinks=False)
    assert sweep_stale_temp_files().removed == 1
    assert (outside / "keep.txt").read_text() == "keep"


def test_it_creates_the_folder_the_uploads_go_to(temp_root):
    assert not temp_root.exists()
    assert temp_dir() == str(temp_root) and temp_root.is_dir()


def test_it_sweeps_from_the_command_and_refuses_a_dangerously_short_age(temp_root, capsys):
    temp_root.mkdir()
    (temp_root / "old").write_bytes(b"z")
    _age(temp_root / "old", 3)
    call_command("sweep_temp_files", "--older-than-hours", "2")
    assert "removed 1 stale entries (1 bytes), kept 0" in capsys.readouterr().out
    with pytest.raises(CommandError, match="under 1 hour"):
        call_command("sweep_temp_files", "--older-than-hours", "0.1")


def test_it_puts_an_upload_under_the_project_folder(temp_root, expert_client):
    """The upload handler writes Django's temporary upload file under SPECVET_TEMP_DIR."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    seen: list[str] = []
    original = os.open

    def spy(path, *args, **kwargs):
        seen.append(str(path))
        return original(path, *args, **kwargs)

    big = SimpleUploadedFile("table.csv", b"wavelength,flux\n" + b"5000,1\n" * 800_000)
    os.open = spy
    try:
        expert_client.post(reverse("spectrum_upload"), {"files": [big], "dataset": "x"})
    finally:
        os.open = original
    assert any(path.startswith(str(temp_root)) and ".upload" in path for path in seen)


def test_it_makes_the_temp_folder_before_djangos_checks_look_for_it(tmp_path):
    """A fresh machine has no SPECVET_TEMP_DIR yet: `manage.py migrate` failed its upload-folder
    check (files.E001) until settings made it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    folder = tmp_path / "fresh" / "specvet-temp"
    env = {
        **os.environ,
        "SPECVET_TEMP_DIR": str(folder),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=root, env=env, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert folder.is_dir()
    assert folder.stat().st_mode & 0o777 == 0o700


def test_it_closes_an_existing_temp_folder_to_other_users(tmp_path):
    from webapp.tempdir import private_temp_dir

    folder = tmp_path / "open"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    private_temp_dir(folder)
    assert folder.stat().st_mode & 0o777 == 0o700


def test_it_refuses_a_temp_folder_that_is_a_link(tmp_path):
    from webapp.tempdir import UnsafeTempDir, private_temp_dir

    target = tmp_path / "somebody-elses"
    target.mkdir()
    planted = tmp_path / "specvet-0"
    planted.symlink_to(target)
    with pytest.raises(UnsafeTempDir, match="link"):
        private_temp_dir(planted)


def test_it_refuses_a_temp_folder_owned_by_another_user(tmp_path, monkeypatch):
    from webapp import tempdir

    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(tempdir.os, "getuid", lambda: folder.stat().st_uid + 1)
    with pytest.raises(tempdir.UnsafeTempDir, match="belongs to user id"):
        tempdir.private_temp_dir(folder)
