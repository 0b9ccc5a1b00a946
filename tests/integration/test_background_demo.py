"""The embedded default with background jobs (issue 15): no Redis, no PostgreSQL.

A real ``celery worker`` (the one ``manage.py serve_demo`` starts) reads kombu's filesystem
broker in a temporary folder and writes a file-backed SQLite database there. Everything runs in
subprocesses with that database, as the demo server and its worker do: the test creates an
inspection run through the service, sees the call return while the candidates still wait, then
sees the worker finish them; a second run is cancelled while the worker runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotation.management.commands.serve_demo import background_env, stop, worker_command

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 120.0

pytestmark = pytest.mark.slow

# Runs in `manage.py shell`: an owner, N spectra and a rule-based run over them, timed.
CREATE = """
import json, time
from django.contrib.auth import get_user_model
from annotation.inspections import services
from annotation.inspections.models import Candidate, CandidateState
from annotation.spectra.models import Task
from tests.factories import make_spectrum

owner, _ = get_user_model().objects.get_or_create(username="owner")
task = Task.objects.get(code="CV")
ids = [make_spectrum(object_id=f"BG-{prefix}-{{i}}", seed={seed} + i).pk for i in range({n})]
started = time.perf_counter()
run = services.inspection_run_create(
    task=task, spectrum_ids=ids, policy_spec={{"kind": "rule-based"}}, created_by=owner
)
seconds = time.perf_counter() - started
finished = Candidate.objects.filter(run=run).exclude(state=CandidateState.PENDING).count()
print(json.dumps({{"run": run.pk, "seconds": seconds, "not_pending": finished}}))
"""

STATES = """
import json
from django.db.models import Count
from annotation.inspections.models import Candidate
rows = Candidate.objects.filter(run_id={run}).values_list("state").annotate(n=Count("id"))
print(json.dumps(dict(rows)))
"""

# Appended to CREATE, so no process start-up lies between the two: wait for the first finished
# candidate, then cancel the run (its owner may).
CANCEL = """
deadline = time.monotonic() + 60
while not Candidate.objects.filter(run=run, state=CandidateState.DONE).exists():
    assert time.monotonic() < deadline, "no candidate finished"
    time.sleep(0.02)
print(json.dumps({"cancelled": services.inspection_run_cancel(run=run, actor=owner)}))
"""


class Site:
    """A scratch embedded-default site: its SQLite file, its broker folder, its worker."""

    def __init__(self, tmp_path: Path) -> None:
        inherited = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("CELERY_", "DATABASE_", "SPECVET_BACKGROUND"))
        }
        self.env = background_env(inherited)
        self.env.update(
            {
                "DJANGO_SETTINGS_MODULE": "webapp.settings",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
                "CELERY_FILESYSTEM_BROKER_DIR": str(tmp_path / "broker"),
                "CELERY_FILESYSTEM_POLLING_INTERVAL": "0.1",
            }
        )
        self.broker = tmp_path / "broker"
        self.log_path = tmp_path / "worker.log"
        self.worker: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr + self.log_tail()
        return result.stdout

    def shell(self, code: str) -> dict[str, Any]:
        """Run code in `manage.py shell`; its printed JSON objects (one a line), merged."""
        found: dict[str, Any] = {}
        for line in self.manage("shell", "-c", code).splitlines():
            if line.startswith("{"):
                found.update(json.loads(line))
        return found

    def start_worker(self) -> None:
        with self.log_path.open("wb") as log:
            self.worker = subprocess.Popen(
                worker_command(pool="threads", concurrency=2, name="bg-test"),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_until(lambda: " ready." in self.log_path.read_text(), "the worker to start")

    def log_tail(self) -> str:
        if not self.log_path.exists():
            return ""
        return "\n--- worker log\n" + self.log_path.read_text(errors="replace")[-4000:]

    def reproduce(self, run: int, *args: str) -> dict[str, int]:
        """``manage.py reproduce`` of the run: how many candidates it checked and how many did
        not reproduce (it exits 1 on a mismatch, which ``manage`` reports with its output)."""
        found = json.loads(self.manage("reproduce", "--run", str(run), "--json", *args))
        return {"checked": found["checked"], "mismatched": found["mismatched"]}

    def states(self, run: int) -> dict[str, int]:
        return self.shell(STATES.format(run=run))

    def wait_until(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not condition():
            if self.worker is not None and self.worker.poll() is not None:
                pytest.fail(f"the worker exited while waiting for {what}{self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"gave up waiting for {what}{self.log_tail()}")
            time.sleep(0.3)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating takes most of a test's time)."""
    folder = tmp_path_factory.mktemp("migrated")
    Site(folder).manage("migrate", "--no-input")
    return folder / "db.sqlite3"


@pytest.fixture
def site(tmp_path: Path, migrated: Path) -> Iterator[Site]:
    shutil.copyfile(migrated, tmp_path / "db.sqlite3")
    found = Site(tmp_path)
    yield found
    if found.worker is not None:
        stop(found.worker, signal.SIGTERM)


def test_it_runs_an_inspection_in_the_background_on_the_filesystem_broker(site):
    # The worker starts after the call: a batch is claimed in one statement, so a worker already
    # polling could mark all six running between the call's commit and the count below.
    created = site.shell(CREATE.format(prefix="a", seed=0, n=6))
    # The call returned with every candidate still waiting: nothing ran in the request.
    assert created["not_pending"] == 0, created
    assert (site.broker / "queue").is_dir()  # the web side created the broker's folders
    assert list((site.broker / "queue").glob("*.msg"))  # and left the work there
    site.start_worker()

    site.wait_until(
        lambda: site.states(created["run"]) == {"done": 6}, "the worker to finish the run"
    )
    assert "annotation.inspections.tasks.run_candidate" in site.log_path.read_text()
    assert not list((site.broker / "queue").glob("*.msg"))  # every message was taken
    assert site.reproduce(created["run"]) == {"checked": 6, "mismatched": 0}


def test_it_cancels_a_run_while_the_worker_runs_it(site):
    site.start_worker()
    # Enough candidates that the cancel lands while work is left even when the cancelling
    # transaction waits a while for SQLite's write lock behind the busy worker.
    created = site.shell(CREATE.format(prefix="c", seed=100, n=150) + CANCEL)
    cancelled = created["cancelled"]
    assert cancelled > 0

    def settled() -> bool:
        states = site.states(created["run"])
        return not states.get("pending") and not states.get("running")

    site.wait_until(settled, "the cancelled run to settle")
    states = site.states(created["run"])
    assert states["cancelled"] >= cancelled
    assert states.get("done", 0) + states["cancelled"] == 150


def _count(site: Site, run: int, state: str) -> int:
    """Read the scratch SQLite file directly: a `manage.py shell` takes seconds to start."""
    import sqlite3

    with sqlite3.connect(site.env["DATABASE_URL"].removeprefix("sqlite:///"), timeout=30) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM annotation_candidate WHERE run_id = ? AND state = ?",
            (run, state),
        ).fetchone()
    return int(count)


def test_it_finishes_a_run_whose_worker_was_killed_outright(site):
    """The filesystem broker has no visibility timeout: the batches a SIGKILLed worker held
    stayed "running" forever until serve_demo sent unfinished work again before its worker."""
    created = site.shell(CREATE.format(prefix="k", seed=300, n=240))
    run = created["run"]
    site.start_worker()
    site.wait_until(lambda: _count(site, run, "done") > 0, "the first candidates to finish")
    assert site.worker is not None
    os.killpg(site.worker.pid, signal.SIGKILL)
    site.worker.wait(timeout=30)
    site.worker = None
    left = 240 - _count(site, run, "done")
    assert left > 0, "the worker finished everything before it was killed"

    printed = site.manage("resend_unfinished")
    assert "candidates" in printed
    site.start_worker()
    site.wait_until(lambda: _count(site, run, "done") == 240, "the rest of the run to finish")
    assert site.states(run) == {"done": 240}
    # What the killed worker and the one after it stored reproduces from each own spectrum.
    assert site.reproduce(run, "--sample", "60") == {"checked": 60, "mismatched": 0}


# Two identical runs of SpecVI-mini spectra (positives and hard negatives), created together.
TWO_RUNS = """
import json
from django.contrib.auth import get_user_model
from agent import synthetic
from annotation.inspections import services
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Task

owner, _ = get_user_model().objects.get_or_create(username="owner")
ids = []
for index, sample in enumerate(synthetic.generate_split("CV", "test", n_pos=8, n_neg=16, seed=5)):
    sample.spectrum.object_id = f"TWIN-{{index}}"
    ids.append(spectra_services.spectra_store(
        values=[sample.spectrum], dataset="twins", source_name="synthetic", synthetic=True
    ).created[0].pk)
runs = [
    services.inspection_run_create(
        task=Task.objects.get(code="{task}"), spectrum_ids=ids,
        policy_spec={{"kind": "rule-based"}}, created_by=owner,
    ).pk
    for _ in range(2)
]
print(json.dumps({{"runs": runs}}))
"""

VERDICTS = """
import json
from annotation.inspections.models import Candidate
rows = Candidate.objects.filter(run_id={run}).values_list("spectrum_id", "verdict", "confidence")
print(json.dumps({{"verdicts": {{str(s): [v, c] for s, v, c in rows}}}}))
"""


def test_it_gives_two_identical_runs_the_same_verdicts_on_the_demo_worker(site):
    """The demo's worker (threads pool of 2): two identical runs at once disagreed on 20 of 50
    candidates when the threads shared one inspector's per-episode state."""
    runs = site.shell(TWO_RUNS.format(task="CV"))["runs"]
    site.start_worker()
    site.wait_until(
        lambda: all(site.states(run) == {"done": 24} for run in runs), "both runs to finish"
    )
    first, second = (site.shell(VERDICTS.format(run=run))["verdicts"] for run in runs)
    assert first == second
    for run in runs:
        assert site.reproduce(run) == {"checked": 24, "mismatched": 0}
