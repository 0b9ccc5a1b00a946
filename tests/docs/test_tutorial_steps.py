"""Every tutorial replayed as written (issue 37 item 11): on the demo data (`make demo`'s loader),
as the user the tutorial logs in as, each numbered step in the order written opens the app URLs
the step names and finds every key the step names on the step's pages (the named page or the
pages it links to under it: "open a draft" from `/curation/`). URLs, keys and users are read from
the markdown, so a tutorial edit that breaks a step fails here.

    .venv/bin/pytest -q -p no:cacheprovider tests/docs/test_tutorial_steps.py
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
APP_URL = re.compile(r"`(/[a-z0-9_\-/]*)`")
FILESYSTEM = ("/usr/", "/srv/", "/etc/", "/var/", "/tmp/", "/home/", "/opt/", "/dev/", "//")
# `K`, `0`, `←`: one key in backticks; `0`-`5`: a range of digit keys.
KEY = re.compile(r"`([A-Za-z0-9←→?])`")
KEY_RANGE = re.compile(r"`(\d)`-`(\d)`")
# "key `s`" in a sentence, `Y` / `N` / `U` beside the word "keys" or a page's buttons: the
# tutorials name keys in backticks; commands and values in backticks are longer than one.
LOGIN = re.compile(r"(?:log in|sign in) as `(\w+)`", re.I)
STEP = re.compile(r"^(\d+)\. (.*?)(?=^\d+\. |^#|\Z)", re.M | re.S)
BULLET = re.compile(r"^- (\*\*.*?)(?=^- |^#|^!|\Z)", re.M | re.S)
SECTION = re.compile(r"^## (\d+)\. .*?(?=^## |\Z)", re.M | re.S)
ARIA_KEYS = {"ArrowLeft": "←", "ArrowRight": "→"}
MAX_PAGES_PER_STEP = 25
# What the replay found and the tutorials or the demo have not settled yet: empty. Listed here so
# that any new break fails, and a fix fails until it is struck from here. Closed on 2026-11-29:
# the vetting keys of candidates-to-catalog.md (/catalog/'s linked pages used up the step's page
# budget before /vetting/ was read; the budget is now per named page) and the audit and vote keys
# of curating-trajectories.md (they appear once a draft is kept, claimed, submitted, claimed and
# approved by two auditors: the replay now acts out a step passed between users).
KNOWN_GAPS: set[str] = set()


@dataclass
class Step:
    tutorial: str
    number: str
    text: str
    urls: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)


def _urls(text: str) -> list[str]:
    return [u for u in APP_URL.findall(text) if not u.startswith(FILESYSTEM)]


def _keys(text: str) -> set[str]:
    keys = {key.upper() for key in KEY.findall(text)}
    for low, high in KEY_RANGE.findall(text):
        keys |= {str(digit) for digit in range(int(low), int(high) + 1)}
    return keys


def tutorial_steps(path: Path) -> list[Step]:
    """The numbered steps of a tutorial in the order written: `1. **Rate** ...` items and
    `## 1. Upload the spectra` sections (a section's own numbered items are its steps)."""
    text = path.read_text()
    sections = SECTION.findall(text) and [m.group(0) for m in SECTION.finditer(text)]
    steps = []
    for section in sections or [text]:
        items = [(m.group(1), m.group(2)) for m in STEP.finditer(section)]
        if sections:
            heading = section.split("\n", 1)[0]
            items = items or [(heading.split(".")[0].lstrip("# "), section)]
        for number, body in items:
            steps.append(Step(path.name, number, body, _urls(body), _keys(body)))
    if not steps:  # a tour (first-ten-minutes): its `- **Page** (`/url/`)` items, in order
        for index, body in enumerate(BULLET.findall(text), start=1):
            steps.append(Step(path.name, f"-{index}", body, _urls(body), _keys(body)))
    return steps


def login_user(path: Path) -> str | None:
    """The user the tutorial logs in as; one that names none starts where the first tutorial
    leaves the reader: `make demo`, signed in as its user."""
    found = LOGIN.search(path.read_text())
    if found is None and "first-ten-minutes" not in path.name:
        return login_user(path.with_name("first-ten-minutes.md"))
    return found.group(1) if found else None


@dataclass
class Press:
    """What pressing a key does on a page: a POST of the key's form (its fields as the page
    fills them, the button's own name and value) or a GET of the key's link."""

    method: str
    url: str
    data: dict[str, str] = field(default_factory=dict)


class _Page(HTMLParser):
    """The keys a page declares (data-key, aria-keyshortcuts), what pressing each does, and the
    links it has."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.keys: set[str] = set()
        self.links: list[str] = []
        self.presses: dict[str, Press] = {}
        self._form: Press | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("data-key", "aria-keyshortcuts"):
            key = values.get(name)
            if key:
                self.keys.add(ARIA_KEYS.get(key, key).upper())
        href = values.get("href")
        if tag == "a" and href and href.startswith("/"):
            self.links.append(href.split("#")[0])
        if tag == "form" and (values.get("method") or "").lower() == "post":
            self._form = Press("post", values.get("action") or self.url)
        if self._form is not None and values.get("name"):
            name = str(values["name"])
            kind = (values.get("type") or "").lower()
            if tag == "input" and kind not in ("checkbox", "radio", "submit", "button"):
                self._form.data.setdefault(name, values.get("value") or "")
            elif tag == "input" and "checked" in values:
                self._form.data.setdefault(name, values.get("value") or "on")
            elif tag == "textarea":
                self._textarea = name
        key = values.get("data-key")
        if not key or key.upper() in self.presses or "disabled" in values:
            return
        if tag == "a" and href and href.startswith("/"):
            self.presses[key.upper()] = Press("get", href)
        elif tag == "button" and self._form is not None:
            data = dict(self._form.data)
            if values.get("name"):
                data[str(values["name"])] = values.get("value") or ""
            self.presses[key.upper()] = Press("post", self._form.url, data)

    def handle_data(self, data: str) -> None:
        if self._form is not None and self._textarea is not None:
            self._form.data[self._textarea] = self._form.data.get(self._textarea, "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._form = None


# "As `leavitt`, claim ..." / "As `payne` and `cannon`, claim ...": the rest of the step (to the
# next such switch) is done as those users.
SWITCH = re.compile(r"\bAs ((?:`\w+`(?:,? and |, )?)+),", re.S)


def user_parts(step: Step, user: str | None) -> list[tuple[list[str], set[str]]]:
    """The step split where it says to switch user: (users, the keys that part names) in order;
    the part before any switch is the tutorial's user's. A key is found when any of the part's
    users has it on the step's pages."""
    parts: list[tuple[list[str], set[str]]] = []
    users, start = [user] if user else [], 0
    for switch in SWITCH.finditer(step.text):
        parts.append((users, _keys(step.text[start : switch.start()])))
        users, start = re.findall(r"`(\w+)`", switch.group(1)), switch.end()
    parts.append((users, _keys(step.text[start:])))
    return [(who, keys) for who, keys in parts if keys or who]


def ordered_keys(keys: set[str], text: str) -> list[str]:
    """``keys`` in the order ``text`` names them first."""
    first = {key: text.upper().find(f"`{key}`") for key in keys}
    return sorted(keys, key=lambda key: (first[key] < 0, first[key], key))


def replay(client: Client, step: Step) -> tuple[list[str], set[str], dict[str, Press]]:
    """Opens the step's URLs in order; returns (problems, the keys found on the step's pages:
    each named page and the pages it links to below its own path, two links deep, at most
    MAX_PAGES_PER_STEP of them per named page: a long list under the first named page must not
    leave the next one unread)."""
    problems: list[str] = []
    found: set[str] = set()
    presses: dict[str, Press] = {}
    seen: set[str] = set()
    for url in step.urls:
        queue = [(url, 0)]
        budget = len(seen) + MAX_PAGES_PER_STEP
        while queue and len(seen) < budget:
            path, depth = queue.pop(0)
            if path in seen:
                continue
            seen.add(path)
            response = client.get(path)
            if path == url and path.startswith("/api/") and response.status_code == 405:
                break  # an API the step posts to: served, not a page to read
            if path == url and response.status_code != 200:
                problems.append(f"{url} answered {response.status_code}")
                break
            if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
                continue
            page = _Page(path)
            page.feed(response.content.decode())
            found |= page.keys
            for key, press in page.presses.items():  # the first page's that offers the
                # key, a form's before a link's (a link to the page where the key acts)
                if key not in presses or (presses[key].method, press.method) == ("get", "post"):
                    presses[key] = press
            if depth < 2:
                below = [link for link in page.links if link.startswith(url) and link != url]
                queue += [(link.split("?")[0], depth + 1) for link in below]
    return problems, found, presses


def test_it_reads_the_steps_urls_keys_and_users_from_the_tutorials() -> None:
    """The replay reads something: the steps, URLs, keys and users the tutorials name."""
    by_name = {path.name: tutorial_steps(path) for path in TUTORIALS}
    rating = by_name["rating.md"]
    assert [s.number for s in rating] == ["1"] and rating[0].urls[0] == "/rating/"
    assert {"0", "5", "T", "←", "→"} <= rating[0].keys
    assert [s.number for s in by_name["closing-the-loop.md"]] == ["1", "2", "3", "4", "5"]
    assert [s.number for s in by_name["candidates-to-catalog.md"]] == ["1", "1", "1"]
    assert {"Y", "N", "U"} <= by_name["candidates-to-catalog.md"][-1].keys
    assert {"K", "D", "C", "S", "U", "A", "R", "Y", "N"} <= by_name["curating-trajectories.md"][
        0
    ].keys
    assert by_name["first-ten-minutes.md"][0].urls == ["/spectra/"]
    assert login_user(ROOT / "docs/tutorials/rating.md") == "payne"
    assert login_user(ROOT / "docs/tutorials/candidates-to-catalog.md") == "cannon"
    assert login_user(ROOT / "docs/tutorials/closing-the-loop.md") == "cannon"
    curate = by_name["curating-trajectories.md"][0]
    parts = user_parts(curate, "cannon")
    assert [who for who, _ in parts] == [["cannon"], ["leavitt"], ["payne", "cannon"]]
    assert {"K", "D"} <= parts[0][1] and {"C", "S", "U"} <= parts[1][1]
    assert {"C", "A", "R", "Y", "N"} <= parts[2][1]


def test_it_finds_a_key_the_page_lacks() -> None:
    """The key check can fail: a step naming a key no page has."""
    step = Step("made-up.md", "1", "press `Q`", ["/nowhere/"], {"Q"})
    assert step.keys - {"K"} == {"Q"}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_replays_every_tutorial_step_in_order_on_the_demo_data() -> None:
    call_command("demo_setup", scale=0.1, stdout=io.StringIO(), stderr=io.StringIO())
    users = get_user_model().objects
    failures: list[str] = []
    replayed = 0
    clients: dict[str | None, Client] = {None: Client()}

    def client_of(name: str | None) -> Client:
        if name not in clients:
            clients[name] = Client()
            clients[name].force_login(users.get(username=name))
        return clients[name]

    for path in TUTORIALS:
        name = login_user(path)
        for step in tutorial_steps(path):
            parts = user_parts(step, name)
            for who, keys in parts:
                # A step passed between users (a workflow) is acted out: each key in the order
                # written, pressed by each of the part's users where a page offers it (what it
                # reveals, the next key or user may need: a kept draft, a claim, an approval).
                # Other steps are only read.
                acting = len(parts) > 1 and bool(step.urls)
                found: set[str] = set()
                sequence: list[str | None] = [*ordered_keys(keys, step.text)] if acting else [None]
                users_of_part: list[str | None] = [*who] or [None]
                for key in sequence:
                    for user in users_of_part:
                        client = client_of(user)
                        problems, keys_found, presses = replay(client, step)
                        found |= keys_found
                        if user == name:  # the step's pages are the tutorial user's (staff
                            # ones refuse a switched-to expert: not what the part asks of them)
                            failures += [f"{path.name} step {step.number}: {p}" for p in problems]
                        if key is not None and key in presses:
                            press = presses[key]
                            getattr(client, press.method)(press.url, press.data)
                missing = keys - found if step.urls else set()
                if missing:
                    failures.append(
                        f"{path.name} step {step.number} (as {' and '.join(map(str, who))}): "
                        f"no page of {step.urls} has the keys {sorted(missing)}"
                    )
            replayed += bool(step.urls)
    assert set(failures) == KNOWN_GAPS, "\n".join(sorted(set(failures) ^ KNOWN_GAPS))
    assert replayed >= 10
