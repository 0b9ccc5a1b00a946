"""A load test on loopback: virtual experts browse queues, rate and audit through real HTTP.

`seed()` makes what the experts need with the project's services (accounts, curations waiting
for their audits, a rating campaign assigned to all of them, catalog rows from a rule-based
inspection run); `run_load()` plays the experts, one thread each, every one logged in through
the login form with its own session; `format_report()` prints the figures. The management
command `loadtest` ties them together.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import random
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent import synthetic
from annotation.core.roles import Role
from annotation.curation import services as curation_services
from annotation.curation.models import Curation, CurationState
from annotation.inspections import services as inspections_services
from annotation.inspections.models import CatalogEntry, InspectionRun, Rollout
from annotation.rating import services as rating_services
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task

USER_PREFIX = "load-expert-"
REVISER = "load-reviser"
DATASET = "loadtest"
RUN_NAME = "loadtest catalog"
CAMPAIGN_PREFIX = "Load test"
LOGIN = "POST /accounts/login/"
LOGIN_TIMEOUT = 600.0  # seconds for every expert to log in (password hashing is slow on purpose)

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
ASSIGNMENT_FIELD = re.compile(r'name="assignment" value="(\d+)"')
VERSION_FIELD = re.compile(r'name="version_number" value="(\d+)"')

CATALOG_FILTERS: tuple[dict[str, str], ...] = (
    {},
    {"task": "CV"},
    {"task": "CV", "verdict": "YES", "sort": "-confidence"},
    {"confidence_min": "0.6", "confidence_max": "0.9"},
    {"expert_decision": "none", "sort": "-snr"},
    {"object_id": "SVM-CV"},
)
CURATION_FILTERS: tuple[dict[str, str], ...] = (
    {},
    {"state": CurationState.IN_AUDIT},
    {"state": CurationState.SCREENING, "task": "CV"},
    {"task": "CV", "page": "2"},
)


# --- seeding ----------------------------------------------------------------------------------


@dataclass
class LoadPlan:
    """What the seeding made, for the virtual experts to act on."""

    usernames: list[str]
    password: str
    campaign_id: int
    catalog_ids: list[int]
    curation_ids: list[int]
    audits: dict[str, list[int]]  # username -> curations waiting for that expert's verdict


def _experts(usernames: list[str], password: str) -> list[Any]:
    """The accounts, all given `password` (hashed once: hashing is slow on purpose)."""
    users = get_user_model()
    for username in usernames:
        users.objects.get_or_create(username=username)
    users.objects.filter(username__in=usernames).update(
        password=make_password(password), is_active=True
    )
    by_name = {user.get_username(): user for user in users.objects.filter(username__in=usernames)}
    # Load-test accounts are fixtures of this command: they join the role groups directly
    # rather than through the audited role service, so a seed leaves no audit entries.
    for role in (Role.EXPERT, Role.RATER):
        Group.objects.get_or_create(name=role.value)[0].user_set.add(*by_name.values())
    return [by_name[username] for username in usernames]


def _catalog_run(task: Task, spectra: int, seed: int, name: str = RUN_NAME) -> InspectionRun:
    """A finished rule-based run over synthetic spectra (reused when an earlier seed made it)."""
    from annotation.inspections import jobs

    run = InspectionRun.objects.filter(name=name, task=task).order_by("-id").first()
    if run is not None and run.catalog.count() == run.candidates.count():
        return run
    n_pos = max(1, spectra // 4)
    samples = synthetic.generate_split("CV", "test", n_pos=n_pos, n_neg=spectra - n_pos, seed=seed)
    ids: list[int] = []
    for label in (True, False):
        values = [s.spectrum for s in samples if s.label is label]
        spectra_services.spectra_store(
            values=values,
            dataset=DATASET,
            source_name="loadtest (SpecVI-mini, synthetic)",
            task=task,
            label="YES" if label else "NO",
            split="test",
        )
        # This run's own spectra, new or stored by an earlier seed: never another run's.
        hashes = [spectra_services.spectrum_content_hash(value) for value in values]
        ids += list(
            Spectrum.objects.filter(dataset=DATASET, content_hash__in=hashes).values_list(
                "pk", flat=True
            )
        )
    run = inspections_services.inspection_run_create(
        task=task,
        spectrum_ids=ids[:spectra],
        policy_spec={"kind": "rule-based"},
        created_by=None,
        name=name,
        confidence_threshold=0.9,
    )
    for candidate_id in run.candidates.values_list("pk", flat=True):
        if inspections_services.candidate_claim(
            candidate_id=candidate_id
        ):  # not run on commit already
            jobs.run_candidate(candidate_id)
    return run


def _curation_in_audit(rollout: Rollout, task: Task, reviser: Any, auditors: list[Any]) -> Curation:
    """A drafted trajectory screened, revised by `reviser` and claimed by both auditors."""
    spectrum = rollout.candidate.spectrum
    curation = curation_services.curation_create(
        spectrum=spectrum,
        task=task,
        trajectory=curation_services.trajectory_from_stored(rollout.data),
        ground_truth=spectrum.label or "NO",
        teacher={"name": "rule-based"},
    )
    curation_services.curation_screen(curation=curation, user=reviser, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    for auditor in auditors:
        curation_services.curation_claim_audit(curation=curation, user=auditor)
    return curation


def seed(
    *,
    users: int,
    password: str,
    audits_per_user: int = 6,
    catalog_spectra: int = 60,
    campaign_items: int = 40,
    seed: int = 0,
    log: Callable[[str], None] = lambda line: None,
) -> LoadPlan:
    """Experts, a rule-based run for the catalog, a campaign rating all its items by every
    expert, curations in audit (each expert one of the two auditors of `audits_per_user`
    of them) and a few drafts to screen."""
    if users < 2:
        raise ValueError("the load test needs at least 2 experts (each audit has two auditors)")
    spectra_services.tasks_seed_builtin()
    task = Task.objects.get(code="CV")
    *experts, reviser = _experts(
        [f"{USER_PREFIX}{i:03d}" for i in range(users)] + [REVISER], password
    )
    log(f"{users} experts ready")
    run = _catalog_run(task, catalog_spectra, seed)
    rollouts = list(
        Rollout.objects.filter(candidate__run=run, index=0)
        .select_related("candidate__run__task", "candidate__spectrum")
        .order_by("candidate_id")
    )
    log(f"catalog: run {run.pk} with {run.catalog.count()} rows")
    # The campaign rates another run over other spectra: raters of an open blinded campaign
    # may not read the runs (or same-spectrum candidates) behind its items, and the virtual
    # experts both rate and browse the catalog.
    rated_run = _catalog_run(task, campaign_items, seed + 1, name=f"{RUN_NAME} (rated)")
    rated_rollouts = list(
        Rollout.objects.filter(candidate__run=rated_run, index=0)
        .select_related("candidate__run__task", "candidate__spectrum")
        .order_by("candidate_id")
    )
    campaign = rating_services.campaign_create(
        name=f"{CAMPAIGN_PREFIX} {timezone.now():%Y-%m-%d %H:%M:%S}",
        raters=experts,
        raters_per_item=len(experts),
        sources=rating_services.rating_sources_from_rollouts(rated_rollouts[:campaign_items]),
        created_by=None,
        seed=seed,
    )
    log(f"rating campaign {campaign.pk}: {campaign.items.count()} items x {users} raters")
    audits: dict[str, list[int]] = {expert.get_username(): [] for expert in experts}
    curation_ids = []
    # Each expert is the first auditor of audits_per_user/2 curations and the second of as many.
    for i in range(users * max(1, audits_per_user // 2)):
        pair = [experts[i % users], experts[(i + 1) % users]]
        with transaction.atomic():
            curation = _curation_in_audit(rollouts[i % len(rollouts)], task, reviser, pair)
        curation_ids.append(curation.pk)
        for auditor in pair:
            audits[auditor.get_username()].append(curation.pk)
    for i in range(max(5, users // 5)):
        rollout = rollouts[i % len(rollouts)]
        curation = curation_services.curation_create(
            spectrum=rollout.candidate.spectrum,
            task=task,
            trajectory=curation_services.trajectory_from_stored(rollout.data),
            ground_truth=rollout.candidate.spectrum.label or "NO",
            teacher={"name": "rule-based"},
        )
        curation_ids.append(curation.pk)
    log(f"{len(curation_ids)} curations: in audit and to screen")
    return LoadPlan(
        usernames=[expert.get_username() for expert in experts],
        password=password,
        campaign_id=campaign.pk,
        catalog_ids=list(CatalogEntry.objects.filter(run=run).values_list("pk", flat=True)),
        curation_ids=curation_ids,
        audits=audits,
    )


# --- the virtual experts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    endpoint: str
    status: int  # 0: no response (connection error, timeout)
    ms: float
    ok: bool
    ended: float  # time.perf_counter() when it completed


@dataclass
class ExpertState:
    username: str
    pending_audits: list[int]
    audited: list[int] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Refused(Exception):
    """A response the workflow did not expect (counted as an error, the expert carries on)."""


class VirtualExpert:
    """One expert's session: log in through the form, then act until the deadline."""

    def __init__(
        self, *, client: httpx.Client, plan: LoadPlan, state: ExpertState, rng: random.Random
    ) -> None:
        self.client = client
        self.plan = plan
        self.state = state
        self.rng = rng

    # -- HTTP with bookkeeping

    def request(
        self, endpoint: str, method: str, url: str, *, expect: int = 200, **kwargs: Any
    ) -> httpx.Response:
        started = time.perf_counter()
        try:
            response = self.client.request(method, url, **kwargs)
        except httpx.HTTPError as error:
            ended = time.perf_counter()
            self.state.samples.append(Sample(endpoint, 0, 1000 * (ended - started), False, ended))
            self.state.errors.append(f"{endpoint}: {type(error).__name__}: {error}")
            raise Refused(endpoint) from error
        ended = time.perf_counter()
        ok = response.status_code == expect
        self.state.samples.append(
            Sample(endpoint, response.status_code, 1000 * (ended - started), ok, ended)
        )
        if not ok:
            self.state.errors.append(
                f"{endpoint}: {method} {url} answered {response.status_code}, expected {expect}: "
                f"{response.text[:200]!r}"
            )
            raise Refused(endpoint)
        return response

    def csrf_header(self) -> dict[str, str]:
        """What htmx sends: the token in X-CSRFToken (base.html's hx-headers)."""
        return {"X-CSRFToken": self.client.cookies.get("csrftoken") or "", "HX-Request": "true"}

    def login(self) -> None:
        page = self.request("GET /accounts/login/", "GET", "/accounts/login/")
        token = CSRF_FIELD.search(page.text)
        if token is None:
            self.state.errors.append("the login page has no CSRF token")
            raise Refused(LOGIN)
        data = {
            "csrfmiddlewaretoken": token.group(1),
            "username": self.state.username,
            "password": self.plan.password,
        }
        self.request(LOGIN, "POST", "/accounts/login/", data=data, expect=302)

    # -- what an expert does

    def my_work(self) -> None:
        self.request("GET /curation/", "GET", "/curation/")

    def curation_list(self) -> None:
        params = self.rng.choice(CURATION_FILTERS)
        self.request("GET /curation/all/?filters", "GET", "/curation/all/", params=params)

    def curation_detail(self) -> None:
        curation_id = self.rng.choice(self.plan.curation_ids)
        self.request("GET /curation/<id>/", "GET", f"/curation/{curation_id}/")

    def catalog_list(self) -> None:
        params = self.rng.choice(CATALOG_FILTERS)
        self.request("GET /catalog/?filters", "GET", "/catalog/", params=params)

    def catalog_detail(self) -> None:
        entry_id = self.rng.choice(self.plan.catalog_ids)
        self.request("GET /catalog/<id>/", "GET", f"/catalog/{entry_id}/")

    def my_work_api(self) -> None:
        self.request("GET /api/curation/my-work/", "GET", "/api/curation/my-work/")

    def rate(self) -> None:
        """Open the rating page and score the trajectory it shows (as the htmx form does)."""
        url = f"/rating/{self.plan.campaign_id}/rate/"
        page = self.request("GET /rating/<id>/rate/", "GET", url)
        assignment = ASSIGNMENT_FIELD.search(page.text)
        if assignment is None:  # everything scored: nothing to post
            return
        data = {
            "assignment": assignment.group(1),
            "score": str(self.rng.randint(0, 5)),
            "comment": self.rng.choice(["", "Coherent.", "The window misses H-beta."]),
        }
        self.request(
            "POST /rating/<id>/rate/ (htmx)", "POST", url, data=data, headers=self.csrf_header()
        )

    def audit(self) -> None:
        """Open the next curation waiting for this expert's verdict and give it."""
        if not self.state.pending_audits:
            if self.state.audited:  # re-read one already audited (the verdict is shown)
                curation_id = self.rng.choice(self.state.audited)
                self.request("GET /curation/<id>/audit/", "GET", f"/curation/{curation_id}/audit/")
            return
        curation_id = self.state.pending_audits.pop(0)
        url = f"/curation/{curation_id}/audit/"
        page = self.request("GET /curation/<id>/audit/", "GET", url)
        version, token = VERSION_FIELD.search(page.text), CSRF_FIELD.search(page.text)
        if version is None or token is None:
            self.state.errors.append(f"{url}: no audit form for {self.state.username}")
            raise Refused(url)
        approve = self.rng.random() < 0.5
        data = {
            "csrfmiddlewaretoken": token.group(1),
            "version_number": version.group(1),
            "verdict": "approve" if approve else "request_changes",
            "comment": "" if approve else "Widen the H-alpha window to show the wings.",
        }
        self.request("POST /curation/<id>/audit/", "POST", url, data=data, expect=302)
        self.state.audited.append(curation_id)

    def actions(self) -> list[tuple[Callable[[], None], int]]:
        return [(getattr(self, name), weight) for name, weight in ACTIONS]


# What an expert does, by name, with how often (relative weights).
ACTIONS: tuple[tuple[str, int], ...] = (
    ("my_work", 20),
    ("curation_list", 10),
    ("curation_detail", 5),
    ("catalog_list", 15),
    ("catalog_detail", 5),
    ("rate", 25),
    ("audit", 15),
    ("my_work_api", 5),
)


@dataclass
class LoadReport:
    users: int
    seconds: float  # the timed window, from the first action to the last response
    think: tuple[float, float]
    url: str
    samples: list[Sample]
    logins: list[Sample]
    errors: list[str]

    @property
    def total(self) -> int:
        return len(self.samples)

    @property
    def error_count(self) -> int:
        """Failed requests (logins included) and pages that lacked the form to act on."""
        return len(self.errors)

    @property
    def rps(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else 0.0


def run_load(
    *,
    plan: LoadPlan,
    url: str,
    seconds: float,
    think: tuple[float, float] = (1.0, 3.0),
    seed: int = 0,
    timeout: float = 30.0,
) -> LoadReport:
    """Log every expert in, then let each act (a think time before every action) for
    `seconds`; requests started before the deadline are counted, logins are not."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a log line per request
    users = len(plan.usernames)
    states = [
        ExpertState(username=name, pending_audits=list(plan.audits.get(name, [])))
        for name in plan.usernames
    ]
    logins: list[list[Sample]] = [[] for _ in states]
    window: dict[str, float] = {}
    barrier = threading.Barrier(users, action=lambda: window.update(start=time.perf_counter()))

    def play(index: int) -> None:
        state = states[index]
        rng = random.Random(seed * 1_000_003 + index)
        with httpx.Client(base_url=url, timeout=timeout, follow_redirects=False) as client:
            expert = VirtualExpert(client=client, plan=plan, state=state, rng=rng)
            logged_in = True
            try:
                expert.login()
            except Refused:
                logged_in = False
            except Exception as error:  # never leave the others waiting at the barrier
                state.errors.append(f"login of {state.username}: {error!r}")
                logged_in = False
            logins[index], state.samples = state.samples, []
            barrier.wait(timeout=LOGIN_TIMEOUT)
            if not logged_in:
                return
            deadline = window["start"] + seconds
            actions, weights = zip(*expert.actions(), strict=True)
            while True:
                pause = rng.uniform(*think)
                if time.perf_counter() + pause >= deadline:
                    break
                time.sleep(pause)
                try:
                    rng.choices(actions, weights)[0]()
                except Refused:
                    pass  # recorded; the expert goes on with something else
                except Exception as error:  # a bug in the script must show, not end a thread
                    state.errors.append(f"{state.username}: {error!r}")

    threads = [threading.Thread(target=play, args=(i,), daemon=True) for i in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = [sample for state in states for sample in state.samples]
    start = window.get("start", time.perf_counter())
    end = max((s.ended for s in samples), default=start + seconds)
    return LoadReport(
        users=users,
        seconds=max(end - start, seconds),
        think=think,
        url=url,
        samples=samples,
        logins=[sample for rows in logins for sample in rows],
        errors=[error for state in states for error in state.errors],
    )


# --- cleaning up -------------------------------------------------------------------------------


def cleanup(*, log: Callable[[str], None] = lambda line: None) -> None:
    """Remove what `seed` wrote that is not a record of expert work, and deactivate accounts.

    Campaigns (with their scores) and runs (with candidates, rollouts and catalog rows) go, and
    so do spectra nothing else refers to. Curations stay: their versions, audits and votes are
    immutable by design, as is the audit log, which keeps naming the accounts; so accounts are
    deactivated rather than deleted, and the next seed reactivates them.
    """
    from annotation.rating.models import RatingCampaign

    with transaction.atomic():
        campaigns = RatingCampaign.objects.filter(name__startswith=CAMPAIGN_PREFIX)
        runs = InspectionRun.objects.filter(name__startswith=RUN_NAME)
        removed = [f"{campaigns.count()} campaigns", f"{runs.count()} runs"]
        campaigns.delete()
        runs.delete()
        kept = Curation.objects.filter(spectrum__dataset=DATASET).values("spectrum_id")
        spectra = Spectrum.objects.filter(dataset=DATASET).exclude(pk__in=kept)
        removed.append(f"{spectra.count()} spectra")
        spectra.delete()
        accounts = get_user_model().objects.filter(
            Q(username__startswith=USER_PREFIX) | Q(username=REVISER)
        )
        deactivated = accounts.update(is_active=False)
    log(
        f"removed {', '.join(removed)}; kept {Curation.objects.filter(spectrum__dataset=DATASET).count()} "
        f"curations (expert work is never deleted); deactivated {deactivated} accounts"
    )


# --- open model: a fixed arrival rate, stepped up --------------------------------------------


@dataclass
class RateStep:
    rate: float  # arrivals per second offered
    samples: list[Sample]  # latency counted from each request's scheduled arrival
    seconds: float
    late: int  # arrivals that waited more than a second for a free expert

    @property
    def p95_ms(self) -> float:
        return percentile([s.ms for s in self.samples], 0.95)

    @property
    def errors(self) -> int:
        return sum(not s.ok for s in self.samples)

    @property
    def achieved_rps(self) -> float:
        return len(self.samples) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class OpenModelReport:
    steps: list[RateStep]
    p95_limit_ms: float
    users: int
    url: str
    errors: list[str]

    @property
    def saturation_rate(self) -> float | None:
        """The highest offered rate whose p95 stayed within the limit with no errors."""
        passing = [s.rate for s in self.steps if s.p95_ms <= self.p95_limit_ms and not s.errors]
        return max(passing) if passing else None


def run_open_model(
    *,
    plan: LoadPlan,
    url: str,
    rates: list[float],
    step_seconds: float,
    p95_limit_ms: float = 500.0,
    seed: int = 0,
    timeout: float = 30.0,
) -> OpenModelReport:
    """Offer requests at each rate in turn (evenly spaced arrivals, whatever the server does)
    until a step's p95 passes ``p95_limit_ms``.

    Latency runs from an arrival's scheduled time, not from when an expert was free to send
    it: a closed loop (think, act, think) slows down with the server and hides its queue;
    timing from the schedule counts the wait (no coordinated omission).
    """
    logging.getLogger("httpx").setLevel(logging.WARNING)
    experts: queue.Queue[VirtualExpert] = queue.Queue()
    clients: list[httpx.Client] = []
    errors: list[str] = []
    for index, name in enumerate(plan.usernames):
        client = httpx.Client(base_url=url, timeout=timeout, follow_redirects=False)
        clients.append(client)
        state = ExpertState(username=name, pending_audits=list(plan.audits.get(name, [])))
        expert = VirtualExpert(
            client=client, plan=plan, state=state, rng=random.Random(seed * 1_000_003 + index)
        )
        try:
            expert.login()
        except Refused:
            errors.extend(state.errors)
            continue
        state.samples = []
        experts.put(expert)
    steps: list[RateStep] = []
    try:
        if experts.empty():
            return OpenModelReport([], p95_limit_ms, 0, url, errors)
        for rate in rates:
            step = _offer(experts, rate, step_seconds, seed)
            steps.append(step)
            if step.p95_ms > p95_limit_ms or step.errors:
                break
    finally:
        for client in clients:
            client.close()
    for expert in list(experts.queue):
        errors.extend(expert.state.errors)
    return OpenModelReport(steps, p95_limit_ms, len(plan.usernames), url, errors)


def _offer(experts: queue.Queue[VirtualExpert], rate: float, seconds: float, seed: int) -> RateStep:
    if rate <= 0 or seconds <= 0:
        raise ValueError(f"rate and step seconds must be positive; got {rate} and {seconds}")
    arrivals = [i / rate for i in range(max(1, round(rate * seconds)))]
    samples: list[Sample] = []
    late = 0
    lock = threading.Lock()
    threads: list[threading.Thread] = []
    rng = random.Random(seed + round(rate * 1000))
    start = time.perf_counter()

    def serve(scheduled: float, action_index: int) -> None:
        nonlocal late
        try:
            expert = experts.get(timeout=seconds + 30.0)
        except queue.Empty:
            return
        waited = time.perf_counter() - scheduled
        before = len(expert.state.samples)
        try:
            getattr(expert, ACTIONS[action_index][0])()
        except Refused:
            pass
        except Exception as error:  # a bug in the script must show, not end the step
            expert.state.errors.append(f"{expert.state.username}: {error!r}")
        finally:
            # Every request this arrival made is timed from the arrival's schedule.
            made = expert.state.samples[before:]
            del expert.state.samples[before:]
            experts.put(expert)
        with lock:
            late += waited > 1.0
            for sample in made:
                samples.append(
                    Sample(
                        sample.endpoint,
                        sample.status,
                        1000 * (sample.ended - scheduled),
                        sample.ok,
                        sample.ended,
                    )
                )

    weights = [weight for _, weight in ACTIONS]
    for offset in arrivals:
        scheduled = start + offset
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        choice = rng.choices(range(len(weights)), weights)[0]
        thread = threading.Thread(target=serve, args=(scheduled, choice), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    elapsed = max((s.ended for s in samples), default=start + seconds) - start
    return RateStep(rate=rate, samples=samples, seconds=max(elapsed, seconds), late=late)


def machine_conditions() -> list[str]:
    """What else ran here: the load test and the server share these cores."""
    lines = [f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (1 min)"]
    try:
        top = subprocess.run(
            ["ps", "-eo", "pcpu,comm", "--sort=-pcpu"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.splitlines()[1:6]
    except (OSError, subprocess.SubprocessError):
        top = []
    if top:
        lines.append("busiest processes (%CPU command): " + "; ".join(row.strip() for row in top))
    return lines


def format_open_model(report: OpenModelReport) -> list[str]:
    header = f"{'offered/s':>9}  {'served/s':>8}  {'requests':>8}  {'p50 ms':>7}  {'p95 ms':>7}  {'errors':>6}  {'late':>5}"
    lines = [
        f"loadtest open model: {report.users} expert sessions against {report.url}; arrivals at "
        f"a fixed rate, stepped up until p95 (from the scheduled arrival) passes "
        f"{report.p95_limit_ms:.0f} ms",
        header,
        "-" * len(header),
    ]
    for step in report.steps:
        ms = [s.ms for s in step.samples]
        lines.append(
            f"{step.rate:>9.1f}  {step.achieved_rps:>8.1f}  {len(step.samples):>8}  "
            f"{statistics.median(ms) if ms else math.nan:>7.0f}  {step.p95_ms:>7.0f}  "
            f"{step.errors:>6}  {step.late:>5}"
        )
    saturation = report.saturation_rate
    lines.append(
        "saturation: no step stayed within the limit"
        if saturation is None
        else f"saturation: {saturation:g} arrivals/s is the highest rate with p95 <= "
        f"{report.p95_limit_ms:.0f} ms and no errors"
    )
    for error in report.errors[:10]:
        lines.append(f"error: {error}")
    lines.append(
        f"RESULT open_model steps={len(report.steps)} "
        f"saturation_rps={saturation if saturation is not None else 0:g}"
    )
    return lines


# --- the report -------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p95 of 40 samples is the 38th smallest)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def _row(name: str, samples: list[Sample], seconds: float, width: int) -> str:
    ms = [s.ms for s in samples]
    errors = sum(not s.ok for s in samples)
    rps = len(samples) / seconds if seconds > 0 else 0.0
    p50 = statistics.median(ms) if ms else math.nan
    return (
        f"{name:<{width}}  {len(samples):>8}  {rps:>6.1f}  {p50:>7.0f}  "
        f"{percentile(ms, 0.95):>7.0f}  {errors:>6}"
    )


def format_report(report: LoadReport) -> list[str]:
    by_endpoint: dict[str, list[Sample]] = {}
    for sample in report.samples:
        by_endpoint.setdefault(sample.endpoint, []).append(sample)
    width = max([len("total"), len(LOGIN), *(len(name) for name in by_endpoint)])
    header = (
        f"{'endpoint':<{width}}  {'requests':>8}  {'rps':>6}  {'p50 ms':>7}  {'p95 ms':>7}  "
        f"{'errors':>6}"
    )
    lines = [
        f"loadtest: {report.users} experts for {report.seconds:.1f} s against {report.url} "
        f"(think time {report.think[0]:g}-{report.think[1]:g} s before each action)",
        header,
        "-" * len(header),
    ]
    lines += [_row(name, rows, report.seconds, width) for name, rows in sorted(by_endpoint.items())]
    lines.append("-" * len(header))
    lines.append(_row("total", report.samples, report.seconds, width))
    login_ms = [s.ms for s in report.logins if s.endpoint == LOGIN]
    lines.append(
        f"logins before the window (not in the figures above): {len(login_ms)}, "
        f"p95 {percentile(login_ms, 0.95):.0f} ms, {sum(not s.ok for s in report.logins)} failed"
    )
    for error in report.errors[:10]:
        lines.append(f"error: {error}")
    ms = [s.ms for s in report.samples]
    lines.append(
        f"RESULT requests={report.total} rps={report.rps:.1f} "
        f"p50_ms={statistics.median(ms) if ms else math.nan:.0f} "
        f"p95_ms={percentile(ms, 0.95):.0f} errors={report.error_count}"
    )
    return lines
