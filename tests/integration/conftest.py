"""Real Celery workers on Redis against the PostgreSQL test database, and a scripted model server.

The worker processes see what the test commits: tests here use
``django_db(transaction=True)`` and pass the test database to the workers via DATABASE_URL.
Each test gets its own Redis key prefix, so parallel runs and other users of the same Redis
database never take each other's messages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection

from tests.factories import answer_turn, tool_call_turn

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
WAIT_SECONDS = 60.0

# The marks of every test that starts real workers: they need Redis and a database the worker
# processes can open (PostgreSQL), and the data each test writes must be committed to be seen.
WORKER_TEST_MARKS = [
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the worker processes must see the test database: needs PostgreSQL (DATABASE_URL)",
    ),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def worker_database_url() -> str:
    db = connection.settings_dict
    credentials = quote(db["USER"] or "postgres")
    if db.get("PASSWORD"):
        credentials += ":" + quote(db["PASSWORD"])
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or "5432"
    return f"postgres://{credentials}@{host}:{port}/{db['NAME']}"


@dataclass
class Broker:
    url: str
    prefix: str
    client: Any

    def enqueue(self, task_name: str, *args: Any) -> str:
        """Send a task by name to its routed queue, as the web process does with a broker."""
        from celery.exceptions import AlwaysEagerIgnored

        from webapp.celery import app

        options = {"global_keyprefix": self.prefix}
        with (
            app.connection_for_write(self.url, transport_options=options) as conn,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", AlwaysEagerIgnored)
            return str(app.send_task(task_name, args=list(args), connection=conn).id)


@pytest.fixture
def broker() -> Iterator[Broker]:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        pytest.skip(f"needs a Redis server at REDIS_URL={REDIS_URL} ({error})")
    found = Broker(url=REDIS_URL, prefix=f"specvet-test-{uuid.uuid4().hex[:10]}:", client=client)
    yield found
    for key in client.scan_iter(f"{found.prefix}*"):
        client.delete(key)
    client.close()


class Worker:
    """``celery -A webapp worker`` in its own process group (so a kill takes its pool too)."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        log_path: Path,
        *,
        pool: str = "prefork",
        concurrency: int = 1,
    ) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "webapp",
                "worker",
                "-Q",
                "default,inspection",
                "--pool",
                pool,
                "--concurrency",
                str(concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{name}@%h",
                "--loglevel",
                "INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the worker and its pool, as a lost machine or the OOM killer would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


@pytest.fixture
def start_worker(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start workers that share the test database and the broker; all are stopped afterwards."""
    started: list[Worker] = []

    def start(name: str, pool: str = "prefork", concurrency: int = 1, **settings: str) -> Worker:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "DATABASE_URL": worker_database_url(),
            "CELERY_BROKER_URL": broker.url,
            "CELERY_RESULT_BACKEND": broker.url,
            "CELERY_TASK_ALWAYS_EAGER": "False",
            "CELERY_REDIS_KEY_PREFIX": broker.prefix,
            # A message whose worker died is handed out again this soon (the default is 1 h).
            "CELERY_VISIBILITY_TIMEOUT": "3",
            "CELERY_RESTORE_INTERVAL": "1",
            "JOB_LEASE_RETRY_DELAY": "1",
            **settings,
        }
        worker = Worker(name, env, tmp_path / f"{name}.log", pool=pool, concurrency=concurrency)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def wait_until(condition: Callable[[], bool], *, workers: list[Worker], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.log_path.name}\n{w.log_tail()}" for w in workers)
            pytest.fail(f"gave up waiting for {what}\n{logs}")
        time.sleep(0.2)


@dataclass
class ChatScript:
    """An OpenAI-compatible endpoint playing the inspection script: a tool call, then YES.

    Each reply's reasoning names the request number, so a step shows which attempt wrote it.
    Request number ``hold`` is held open (the model "thinking") until ``release`` is set.
    """

    hold: int | None = None
    requests: int = 0
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.requests += 1
            number = self.requests
        if number == self.hold:
            self.held.set()
            self.release.wait(timeout=WAIT_SECONDS)
        think = f"request {number}"
        turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
        if turn == 0:
            return tool_call_turn(6500, 6630, "H-alpha", think=think)
        return answer_turn("YES", think=think)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The held request's client was killed: writing its reply fails, as expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def chat_script() -> Iterator[ChatScript]:
    script = ChatScript()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = script.reply(body)
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": content}}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = _QuietServer(("127.0.0.1", 0), Handler)
    script.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield script
    script.release.set()
    server.shutdown()
    server.server_close()
