"""Play concurrent experts against a running specvet for a fixed time and print the figures.

    createdb -h 127.0.0.1 -U postgres specvet_load
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_load
    .venv/bin/python manage.py migrate
    .venv/bin/gunicorn webapp.wsgi -w 4 -b 127.0.0.1:8001 &
    .venv/bin/python manage.py loadtest --users 50 --seconds 60 --url http://127.0.0.1:8001

The command seeds its own data in the database the server uses (same DATABASE_URL), logs each
expert in through the login form, then for the given time every expert repeats: wait a think
time, then browse a queue, rate or audit. It prints requests per second, p50/p95 latency and
the errors, per endpoint and in total.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.bench import loadtest

DEFAULT_PASSWORD = "specvet-load-test"  # loopback test accounts only


def _think(raw: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in raw.split(","))
    except ValueError:
        raise CommandError(f"--think takes MIN,MAX in seconds, e.g. 1,3; got {raw!r}") from None
    if not 0 <= low <= high:
        raise CommandError(f"--think needs 0 <= MIN <= MAX; got {raw!r}")
    return low, high


class Command(BaseCommand):
    help = (
        "Load test on loopback: N experts browse queues, rate and audit for S seconds against "
        "--url; prints requests/s, p50/p95 latency and errors per endpoint and in total."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--users", type=int, default=50, help="concurrent experts")
        parser.add_argument("--seconds", type=float, default=60.0, help="length of the run")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server to load")
        parser.add_argument(
            "--think",
            default="1,3",
            help="MIN,MAX seconds an expert waits before each action (uniform; default 1,3)",
        )
        parser.add_argument("--seed-only", action="store_true", help="seed the data and stop")
        parser.add_argument("--password", default=DEFAULT_PASSWORD, help="the experts' password")
        parser.add_argument("--audits-per-user", type=int, default=6)
        parser.add_argument("--catalog-spectra", type=int, default=60)
        parser.add_argument("--campaign-items", type=int, default=40)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--open-model",
            action="store_true",
            help="offer requests at fixed rates (see --rates) instead of experts with think time",
        )
        parser.add_argument(
            "--rates",
            default="5,10,20,40,80,160",
            help="open model: arrivals per second, one step each, until p95 passes the limit",
        )
        parser.add_argument("--step-seconds", type=float, default=20.0)
        parser.add_argument("--p95-limit-ms", type=float, default=500.0)
        parser.add_argument(
            "--cleanup",
            action="store_true",
            help="afterwards remove what the seed wrote (accounts are deactivated)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        think = _think(options["think"])
        if options["users"] < 2:
            raise CommandError("--users must be at least 2 (each audit has two auditors)")
        if options["seconds"] <= 0:
            raise CommandError("--seconds must be positive")
        for name in ("audits_per_user", "catalog_spectra", "campaign_items"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        plan = loadtest.seed(
            users=options["users"],
            password=options["password"],
            audits_per_user=options["audits_per_user"],
            catalog_spectra=options["catalog_spectra"],
            campaign_items=options["campaign_items"],
            seed=options["seed"],
            log=lambda line: self.stdout.write(f"seed: {line}"),
        )
        if options["seed_only"]:
            return
        for line in loadtest.machine_conditions():
            self.stdout.write(line)
        try:
            if options["open_model"]:
                self._open_model(plan, options)
            else:
                self._closed_model(plan, options, think)
        finally:
            if options["cleanup"]:
                loadtest.cleanup(log=lambda line: self.stdout.write(f"cleanup: {line}"))
        for line in loadtest.machine_conditions():
            self.stdout.write(f"after: {line}")

    def _open_model(self, plan: loadtest.LoadPlan, options: dict[str, Any]) -> None:
        try:
            rates = [float(rate) for rate in options["rates"].split(",") if rate.strip()]
        except ValueError:
            raise CommandError(
                f"--rates takes numbers like 5,10,20; got {options['rates']!r}"
            ) from None
        if not rates or min(rates) <= 0 or options["step_seconds"] <= 0:
            raise CommandError("--rates must be positive numbers and --step-seconds positive")
        report = loadtest.run_open_model(
            plan=plan,
            url=options["url"].rstrip("/"),
            rates=rates,
            step_seconds=options["step_seconds"],
            p95_limit_ms=options["p95_limit_ms"],
            seed=options["seed"],
        )
        for line in loadtest.format_open_model(report):
            self.stdout.write(line)
        if not report.steps:
            raise CommandError(f"no expert could log in at {options['url']}; is it running?")

    def _closed_model(
        self, plan: loadtest.LoadPlan, options: dict[str, Any], think: tuple[float, float]
    ) -> None:
        report = loadtest.run_load(
            plan=plan,
            url=options["url"].rstrip("/"),
            seconds=options["seconds"],
            think=think,
            seed=options["seed"],
        )
        for line in loadtest.format_report(report):
            self.stdout.write(line)
        if not report.samples:
            raise CommandError(f"no request reached {options['url']}; is the server running?")
