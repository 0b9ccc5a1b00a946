"""Browser tests: Debian's headless Chromium driven by Playwright against pytest-django's live_server.

Every page a test opens is watched for JavaScript errors (console errors and uncaught
exceptions), Content-Security-Policy violations and server errors; any of them fails the test.
A failing test leaves a screenshot and the HTML of each open page in test-artifacts/.

Set SPECVET_SKIP_E2E=1 to skip these tests where Chromium cannot be installed;
SPECVET_CHROMIUM overrides the browser's path (default /usr/bin/chromium).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

from annotation.spectra import services

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = os.environ.get("SPECVET_CHROMIUM", "/usr/bin/chromium")
# The flags this machine needs (no network beyond the registries, no GPU, root without a sandbox).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000
SKIP_VARIABLE = "SPECVET_SKIP_E2E"

# Reports a violation to the test through a binding; CDP-injected, so the page's CSP allows it.
CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__specvetCspViolation(
    `${event.violatedDirective} blocked ${event.blockedURI || "inline code"}` +
    ` (${event.sourceFile || "page"}:${event.lineNumber})`
  );
});
"""

PAGES_KEY = pytest.StashKey["BrowserPages"]()

if os.environ.get(SKIP_VARIABLE) == "1":
    try:
        import playwright  # noqa: F401
    except ImportError:  # skipped anyway: don't let their imports break collection
        collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SKIP_VARIABLE) != "1":
        return
    skip = pytest.mark.skip(reason=f"browser tests skipped ({SKIP_VARIABLE}=1)")
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    pages = item.stash.get(PAGES_KEY, None)
    if pages is not None and report.failed and report.when in ("setup", "call"):
        pages.failed = True
        pages.save_artifacts(item.nodeid)
        if pages.problems:  # often the cause: a script that broke leaves a button doing nothing
            report.sections.append(("browser problems", "\n".join(pages.problems)))
    return report


@pytest.fixture(scope="package")
def browser(django_db_setup: None) -> Iterator[Browser]:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: the browser tests need Debian's "
            "package (`make test` installs it with `apt-get install -y chromium`). "
            f"Set {SKIP_VARIABLE}=1 to skip the browser tests instead.",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "the browser tests need Playwright: `make test` installs requirements-dev.txt "
            f"(or set {SKIP_VARIABLE}=1 to skip them)",
            pytrace=False,
        )
    # Playwright's sync API keeps its event loop set in this thread while the browser lives, which
    # trips Django's guard against ORM calls from async code; the tests' ORM calls (seeding,
    # force_login) are plain synchronous code, so turn the guard off for that time. Package scope
    # (one Chromium for all of tests/e2e, a fresh context per page; a launch with Playwright's
    # driver costs ~3 s): the loop must be gone before the rest of the suite runs (asyncio.run
    # refuses a running one), and pytest-django runs the e2e tests (all transactional) one after
    # another, so the package's teardown comes right after the last of them. The test database
    # is set up before it starts (this fixture depends on it).
    # While Playwright's loop runs, Django hands this thread other connection objects, which
    # lack the serialized test database: without it, each test would end with a flush that
    # re-creates content types under new ids and breaks the next serialized rollback.
    serialized = {
        alias: connections[alias]._test_serialized_contents
        for alias in connections
        if hasattr(connections[alias], "_test_serialized_contents")
    }
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        for alias, contents in serialized.items():
            connections[alias]._test_serialized_contents = contents
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


class BrowserPages:
    """The pages one test opens, one browser context per user, and what went wrong on them."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url
        self.contexts: list[BrowserContext] = []
        self.pages: dict[str, Page] = {}
        self.problems: list[str] = []
        self.failed = False

    def open(self, name: str, user: Any = None) -> Page:
        """A page in a fresh context, logged in as user (session cookie from force_login)."""
        context = self.browser.new_context(base_url=self.base_url)
        context.set_default_timeout(TIMEOUT_MS)
        context.expose_binding(
            "__specvetCspViolation",
            lambda source, text: self.problems.append(
                f"[{name}] CSP violation on {source['page'].url}: {text}"
            ),
        )
        context.add_init_script(CSP_LISTENER)
        if user is not None:
            client = Client()
            client.force_login(user)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
            context.add_cookies(
                [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": self.base_url}]
            )
        page = context.new_page()
        self.watch(name, page)
        self.contexts.append(context)
        self.pages[name] = page
        return page

    def tab(self, name: str, beside: Page) -> Page:
        """Another page in the same context (same user) as beside."""
        page = beside.context.new_page()
        self.watch(name, page)
        self.pages[name] = page
        return page

    def watch(self, name: str, page: Page) -> None:
        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                self.problems.append(f"[{name}] console error on {page.url}: {message.text}")

        page.on("console", on_console)
        page.on(
            "pageerror",
            lambda error: self.problems.append(f"[{name}] uncaught error on {page.url}: {error}"),
        )
        page.on(
            "response",
            lambda response: (
                self.problems.append(
                    f"[{name}] HTTP {response.status} for {response.request.method} {response.url}"
                )
                if response.status >= 500
                else None
            ),
        )

    def assert_clean(self) -> None:
        """No JavaScript error, CSP violation or server error on any page so far."""
        problems, self.problems = self.problems, []
        assert not problems, "the browser reported problems:\n" + "\n".join(problems)

    def save_artifacts(self, nodeid: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)
        for name, page in self.pages.items():
            if page.is_closed():
                continue
            try:
                page.screenshot(path=ARTIFACTS / f"{stem}-{name}.png", full_page=True)
                (ARTIFACTS / f"{stem}-{name}.html").write_text(page.content())
            except Exception as error:  # a crashed page must not hide the test's own failure
                (ARTIFACTS / f"{stem}-{name}.txt").write_text(f"no screenshot: {error}\n")

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def pages(
    request: pytest.FixtureRequest,
    browser: Browser,
    live_server: Any,
) -> Iterator[BrowserPages]:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    browser_pages = BrowserPages(browser, live_server.url)
    request.node.stash[PAGES_KEY] = browser_pages
    yield browser_pages
    try:
        if browser_pages.problems and not browser_pages.failed:
            browser_pages.save_artifacts(request.node.nodeid)
            browser_pages.assert_clean()
    finally:
        browser_pages.close()
