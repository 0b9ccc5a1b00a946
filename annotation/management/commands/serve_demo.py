"""The dev server with a Celery worker beside it, so long work runs in the background.

``make demo`` and ``make serve`` run this. Both children get ``SPECVET_BACKGROUND_JOBS=1`` (and
``CELERY_TASK_ALWAYS_EAGER=False``): the web process only enqueues, the worker runs the jobs. With
no ``CELERY_BROKER_URL`` they share kombu's filesystem broker (webapp/settings.py), so nothing
but this one command is needed. Ctrl-C or SIGTERM stops the server and the worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

WORKER_QUEUES = "default,inspection,gpu"
STOP_SECONDS = 15.0


def background_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the server and the worker: jobs go to the worker, never in-process."""
    env = dict(os.environ if base is None else base)
    env["SPECVET_BACKGROUND_JOBS"] = "1"
    env["CELERY_TASK_ALWAYS_EAGER"] = "False"
    return env


def worker_command(*, pool: str, concurrency: int, name: str = "demo") -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webapp",
        "worker",
        "-Q",
        WORKER_QUEUES,
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
    ]


def stop(process: subprocess.Popen[bytes], first: signal.Signals) -> None:
    """Signal the child's process group, then kill it if it has not exited in STOP_SECONDS."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, first)
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_SECONDS)
    except ProcessLookupError:
        pass


def prune_processed(max_age_seconds: float = 60.0) -> int:
    """Delete the filesystem broker's taken messages (kept as files) from earlier sessions."""
    folder = (settings.CELERY_BROKER_TRANSPORT_OPTIONS or {}).get("processed_folder")
    if not folder or not Path(str(folder)).is_dir():
        return 0
    cutoff = time.time() - max_age_seconds
    removed = 0
    for path in Path(str(folder)).glob("*.msg"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError:
            pass
    return removed


class Command(BaseCommand):
    help = (
        "Run the dev server with a Celery worker beside it (background jobs, no Redis needed); "
        "Ctrl-C stops both."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--pool", default="threads", choices=["threads", "solo", "prefork"])
        parser.add_argument("--concurrency", type=int, default=2)
        parser.add_argument("--noreload", action="store_true", help="passed on to runserver")
        parser.add_argument(
            "--worker-log",
            default=str(settings.BASE_DIR / "var" / "demo-worker.log"),
            help="where the worker's output goes ('-': this terminal)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        env = background_env()
        if not os.environ.get("CELERY_BROKER_URL"):
            pruned = prune_processed()
            if pruned:
                self.stdout.write(f"removed {pruned} taken broker messages from earlier sessions")
            # Before the worker starts: what a killed worker held is lost on this broker.
            subprocess.run(
                [sys.executable, "manage.py", "resend_unfinished"],
                cwd=settings.BASE_DIR,
                env=env,
                check=True,
            )
        if connection.vendor == "sqlite":
            # The server and the worker write the same file: with a write-ahead log, readers
            # never block the writer (the mode is stored in the database file).
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode=WAL")
            connection.close()

        log_target = options["worker_log"]
        log = None
        if log_target != "-":
            Path(log_target).parent.mkdir(parents=True, exist_ok=True)
            log = open(log_target, "ab")  # noqa: SIM115 (closed in the finally below)
        worker = subprocess.Popen(
            worker_command(pool=options["pool"], concurrency=options["concurrency"]),
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            start_new_session=True,  # stopped by us, after the server
        )
        self.stdout.write(
            f"celery worker (pid {worker.pid}, {options['pool']} x {options['concurrency']}, "
            f"queues {WORKER_QUEUES}) logs to {log_target if log else 'this terminal'}"
        )
        server_args = [sys.executable, "manage.py", "runserver", options["addrport"]]
        if options["noreload"]:
            server_args.append("--noreload")
        # Its own process group too: the autoreloader's child must stop with it.
        server = subprocess.Popen(
            server_args, cwd=settings.BASE_DIR, env=env, start_new_session=True
        )

        def terminate(signum: int, _frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, terminate)
        problem = ""
        try:
            while server.poll() is None:
                if worker.poll() is not None:
                    problem = f"the celery worker exited (code {worker.returncode}); stopping"
                    break
                time.sleep(0.5)
            else:
                problem = f"the dev server exited (code {server.returncode})"
        except KeyboardInterrupt:
            self.stdout.write("stopping the dev server and the celery worker")
        finally:
            signal.signal(signal.SIGTERM, previous)
            # SIGTERM, not SIGINT: a child started from a background shell ignores SIGINT.
            stop(server, signal.SIGTERM)
            stop(worker, signal.SIGTERM)  # warm shutdown: running tasks finish first
            if log:
                log.close()
        if problem:
            raise CommandError(problem)
