"""The embedded default's filesystem broker: a message is never read before it is whole."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem

from webapp import broker

QUEUE = "inspection"


def channel(folder: Path, transport: Any) -> Any:
    for name in ("queue", "processed", "control"):
        (folder / name).mkdir(exist_ok=True)
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "store_processed": True,
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
    }
    return Connection("filesystem://", transport=transport, transport_options=options).channel()


def test_it_finds_kombu_s_own_channel_reads_a_message_file_still_being_written(tmp_path) -> None:
    """Why webapp.broker exists: kombu creates the file before it writes it, and its reader
    takes any such file, so a reader between the two gets an empty payload."""
    reader = channel(tmp_path, "filesystem")
    assert type(reader) is filesystem.Channel
    (tmp_path / "queue" / broker.message_name(QUEUE)).write_bytes(b"")  # created, not written
    with pytest.raises(ValueError, match="Expecting value"):
        reader._get(QUEUE)


def test_it_shows_the_reader_no_message_until_it_is_whole(tmp_path, monkeypatch) -> None:
    ours = channel(tmp_path, "webapp.broker:Transport")
    assert isinstance(ours, broker.Channel)
    seen_while_writing = []
    replace = os.replace

    def look_then_replace(source: str, target: str) -> None:
        # The message is written in full here, but not yet in place: a reader finds nothing.
        assert Path(source).read_bytes()
        try:
            seen_while_writing.append(ours._get(QUEUE))
        except filesystem.Empty:
            seen_while_writing.append(None)
        replace(source, target)

    monkeypatch.setattr(broker.os, "replace", look_then_replace)
    payload = {"body": "x" * 100_000, "headers": {"task": "run_candidates"}}
    ours._put(QUEUE, payload)
    assert seen_while_writing == [None]
    assert ours._get(QUEUE) == payload
    assert not list((tmp_path / "queue").iterdir()), "nothing left behind"


def test_it_uses_the_whole_message_channel_for_the_filesystem_broker() -> None:
    """The settings' filesystem branch names this transport (the demo's worker and web)."""
    from kombu.transport import resolve_transport

    assert resolve_transport("webapp.broker:Transport") is broker.Transport
    source = (Path(__file__).resolve().parents[3] / "webapp" / "settings.py").read_text()
    assert 'CELERY_BROKER_TRANSPORT = "webapp.broker:Transport"' in source
