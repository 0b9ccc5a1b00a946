"""Production settings from the environment: the deploy check, collectstatic, gunicorn, whitenoise."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST = "specvet.example.org"

pytestmark = pytest.mark.slow


def production_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "CELERY_", "DATABASE_", "SECURE_", "OPENAI_"))
    }
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "False",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": HOST,
        "CSRF_TRUSTED_ORIGINS": f"https://{HOST}",
        "DATABASE_URL": "postgres://specvet@db.internal:5432/specvet",
        "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
        "CELERY_RESULT_BACKEND": "redis://redis.internal:6379/1",
        "CELERY_TASK_ALWAYS_EAGER": "False",
        "STATIC_ROOT": str(tmp_path / "staticfiles"),
        **overrides,
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_the_deploy_check_with_production_settings(tmp_path):
    result = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_it_refuses_to_start_without_a_secret_key_in_production(tmp_path):
    result = manage(production_env(tmp_path, SECRET_KEY=""), "check")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp_path = tmp_path_factory.mktemp("gunicorn")
    # The pages served here never touch the database; a file SQLite keeps the test offline.
    env = production_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'unused.sqlite3'}")
    collected = manage(env, "collectstatic", "--no-input")
    assert collected.returncode == 0, collected.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "gunicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail((tmp_path / "gunicorn.log").read_text())
            time.sleep(0.2)
    yield url
    server.send_signal(signal.SIGINT)  # quick shutdown; SIGTERM would wait for keep-alives
    server.wait(timeout=20)
    log.close()


def test_it_serves_pages_and_hashed_static_files_from_gunicorn(gunicorn):
    # Behind the TLS proxy: the proxy says https, so no redirect to it.
    headers = {"Host": HOST, "X-Forwarded-Proto": "https"}
    page = httpx.get(f"{gunicorn}/accounts/login/", headers=headers)
    assert page.status_code == 200
    assert "max-age=3600" in page.headers["Strict-Transport-Security"]
    stylesheet = re.search(r'href="(/static/css/app\.[0-9a-f]{12}\.css)"', page.text)
    assert stylesheet, "the page links no hashed stylesheet"
    static = httpx.get(
        f"{gunicorn}{stylesheet.group(1)}", headers={**headers, "Accept-Encoding": "gzip"}
    )
    assert static.status_code == 200
    assert static.headers["Content-Encoding"] == "gzip"
    assert "immutable" in static.headers["Cache-Control"]


def test_it_redirects_plain_http_to_https_in_production(gunicorn):
    response = httpx.get(f"{gunicorn}/accounts/login/", headers={"Host": HOST})
    assert response.status_code == 301
    assert response.headers["Location"] == f"https://{HOST}/accounts/login/"


def test_it_shares_the_throttle_cache_through_redis_when_configured(tmp_path):
    env = production_env(tmp_path, CACHE_URL="redis://redis.internal:6379/2")
    result = manage(
        env, "shell", "-c", "from django.conf import settings; print(settings.CACHES['default'])"
    )
    assert result.returncode == 0, result.stderr
    assert "RedisCache" in result.stdout and "redis://redis.internal:6379/2" in result.stdout
