"""Real ``celery worker`` processes for the benchmarks (``bench_candidates``, ``bench.scale``).

Each benchmark starts its workers on a Redis broker under a key prefix of its own, so that
several benchmarks (or sessions) can share one Redis database without taking each other's
messages; sends ``run_candidates`` messages to them; reads their CPU and memory from /proc; and
stops them, their process groups and their keys. Django must be set up before ``send``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
RUN_CANDIDATES = "annotation.inspections.tasks.run_candidates"


def group_processes(pgid: int) -> list[int]:
    """The processes of a worker's process group (the worker and any pool children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            found.append(int(entry.name))
    return found


def group_cpu_seconds(pgid: int) -> float:
    """User and system CPU of a process group, its reaped children included."""
    total = 0
    for pid in group_processes(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


def group_peak_mib(pgid: int) -> float:
    """The largest resident peak (VmHWM) of a process group's processes."""
    peak = 0
    for pid in group_processes(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            continue
    return peak / 1024


class Workers:
    """Real ``celery worker`` processes on a Redis broker under a key prefix of their own,
    run from ``code`` (a checkout: this one by default, another to measure its path)."""

    def __init__(self, redis_url: str, log_dir: Path, *, code: Path = ROOT) -> None:
        self.redis_url = redis_url
        self.prefix = f"specvet-bench-{uuid.uuid4().hex[:10]}:"
        self.log_dir = log_dir
        self.code = code
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        count: int,
        *,
        threads: int,
        pool: str | None = None,
        env: dict[str, str] | None = None,
        name: str = "bench",
    ) -> None:
        """Start ``count`` worker processes of ``threads`` pool threads on the inspection queue;
        ``pool`` defaults to threads, or solo for one thread. ``env`` adds settings."""
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "CELERY_BROKER_URL": self.redis_url,
            "CELERY_RESULT_BACKEND": self.redis_url,
            "CELERY_TASK_ALWAYS_EAGER": "False",
            "CELERY_REDIS_KEY_PREFIX": self.prefix,
            **(env or {}),
        }
        if self.code.resolve() != ROOT:
            environment["PYTHONPATH"] = str(self.code)
        pool = pool or ("threads" if threads > 1 else "solo")
        for index in range(count):
            node = f"{name}{index}-{uuid.uuid4().hex[:6]}"
            log = (self.log_dir / f"{node}.log").open("wb")
            self.processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "webapp",
                        "worker",
                        "-Q",
                        "inspection",
                        "--pool",
                        pool,
                        "--concurrency",
                        str(threads),
                        "--without-gossip",
                        "--without-mingle",
                        "--without-heartbeat",
                        "-n",
                        f"{node}@%h",
                        "--loglevel",
                        "WARNING",
                    ],
                    cwd=self.code,
                    env=environment,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def wait_ready(self, seconds: float = 120.0) -> None:
        """Until every worker has imported Django and connected (its CPU has settled)."""
        deadline = time.monotonic() + seconds
        last = -1.0
        while time.monotonic() < deadline:
            if any(process.poll() is not None for process in self.processes):
                raise RuntimeError(f"a worker exited at start; logs in {self.log_dir}")
            now = self.cpu_seconds()
            if now == last and now > 0:
                return
            last = now
            time.sleep(2.0)

    def cpu_seconds(self) -> float:
        return sum(group_cpu_seconds(process.pid) for process in self.processes)

    def peak_mib(self) -> float:
        return max((group_peak_mib(process.pid) for process in self.processes), default=0.0)

    def exited(self) -> bool:
        return any(process.poll() is not None for process in self.processes)

    def send(self, batches: list[list[int]]) -> float:
        """Send the messages; returns the time just before the first one went out (after the
        broker connection is set up, which a producer keeps open in a deployment)."""
        from celery.exceptions import AlwaysEagerIgnored

        from webapp.celery import app

        options = {"global_keyprefix": self.prefix}
        with (
            app.connection_for_write(self.redis_url, transport_options=options) as conn,
            warnings.catch_warnings(),
        ):
            conn.ensure_connection()
            warnings.simplefilter("ignore", AlwaysEagerIgnored)
            sent = time.time()
            for batch in batches:
                app.send_task(RUN_CANDIDATES, args=[batch], connection=conn)
        return sent

    def stop(self) -> None:
        """SIGTERM each worker's process group (running tasks finish), SIGKILL after 30 s."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.processes = []

    def clear_broker(self) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        for key in client.scan_iter(f"{self.prefix}*"):
            client.delete(key)
        client.close()
