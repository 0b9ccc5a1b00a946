"""Sphinx extension: the reference pages generated from the code at build time.

- ``reference/generated/settings.md``: every environment variable the code reads (names and
  defaults from the source, meanings from reference/settings.toml; drift is a build error).
- ``reference/generated/commands.md``: every ``manage.py`` command of the site and the
  ``python -m agent.bench`` benchmarks, their help as argparse prints it.
- ``reference/generated/api.md`` and ``openapi.json``: the REST API from drf-spectacular's schema.

Generated files are not committed (docs/.gitignore); a build on a fresh clone writes them.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import env_reference
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

ROOT = env_reference.ROOT
OUT = ROOT / "docs" / "reference" / "generated"
LOGGER = logging.getLogger(__name__)
METHODS = ("get", "post", "put", "patch", "delete")


def _write(name: str, text: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    if not path.exists() or path.read_text() != text:  # unchanged files keep Sphinx's cache
        path.write_text(text)


def _django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def settings_reference() -> None:
    reads, described = env_reference.env_reads(), env_reference.meanings()
    for problem in env_reference.drift(reads, described):
        LOGGER.warning("settings reference: %s", problem)
    _write("settings.md", env_reference.settings_page(reads, described))


def _fenced(text: str) -> list[str]:
    return ["```text", text.rstrip(), "```", ""]


def commands_reference() -> None:
    from django.core.management import get_commands, load_command_class

    from agent.bench.cli import make_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page must not vary
    lines = [
        "# Commands",
        "",
        "Generated when the docs are built, from each command's own argument parser.",
        "",
        "## `manage.py` commands",
        "",
    ]
    for name, app in sorted(get_commands().items()):
        if app != "annotation":
            continue
        command = load_command_class(app, name)
        lines += [f"### `{name}`", "", str(command.help).strip(), ""]
        lines += _fenced(command.create_parser("manage.py", name).format_help())
        # The module's own account (usage, what is measured or changed), where it gives one.
        about = sys.modules[type(command).__module__].__doc__ or ""
        if len(about.strip().splitlines()) > 1:
            lines += [f"From `{type(command).__module__}`:", ""] + _fenced(about.strip())
    lines += ["## `python -m agent.bench`", ""]
    lines += _fenced(make_parser().format_help())
    from agent.bench import real

    lines += ["## `python -m agent.bench.real`", "", str(real.__doc__).strip().splitlines()[0], ""]
    lines += _fenced(str(real.__doc__))
    _write("commands.md", "\n".join(lines))


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if "oneOf" in schema or "allOf" in schema:
        parts = schema.get("oneOf") or schema.get("allOf") or []
        return " or ".join(_schema_type(part) for part in parts)
    kind = str(schema.get("type", "object"))
    return f"{kind} ({schema['format']})" if "format" in schema else kind


def api_reference() -> None:
    from drf_spectacular.generators import SchemaGenerator

    with redirect_stderr(io.StringIO()):
        schema = SchemaGenerator().get_schema(request=None, public=True)
    schema = json.loads(json.dumps(schema, default=str))
    _write("openapi.json", json.dumps(schema, indent=1, sort_keys=True))
    info = schema.get("info", {})
    lines = [
        "# REST API",
        "",
        "Generated when the docs are built from the OpenAPI schema the site serves at",
        f"`/api/schema/` ({info.get('title', '')} {info.get('version', '')}); the schema itself:",
        "{download}`openapi.json <openapi.json>`. Authentication, tokens and errors: see",
        "[the API guide](../api.md).",
        "",
    ]
    for path, operations in sorted(schema["paths"].items()):
        for method in METHODS:
            operation = operations.get(method)
            if not operation:
                continue
            lines += [f"## `{method.upper()} {path}`", ""]
            text = operation.get("description") or operation.get("summary") or ""
            if text:
                lines += [_cell(text), ""]
            parameters = operation.get("parameters", [])
            if parameters:
                lines += [
                    "| parameter | in | required | type | description |",
                    "|---|---|---|---|---|",
                ]
                for p in parameters:
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(_schema_type(p.get('schema', {})))} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {})
            if body:
                kinds = ", ".join(
                    f"`{kind}` ({_schema_type(content.get('schema', {}))})"
                    for kind, content in body.items()
                )
                lines += [f"Request body: {kinds}.", ""]
            responses = operation.get("responses", {})
            if responses:
                answers = "; ".join(
                    f"{code} {_cell(answer.get('description', ''))}".strip()
                    for code, answer in sorted(responses.items())
                )
                lines += [f"Responses: {answers}.", ""]
    components = schema.get("components", {}).get("schemas", {})
    if components:
        lines += ["## Schemas", ""]
        for name, component in sorted(components.items()):
            lines += [f"### {name}", ""]
            if component.get("description"):
                lines += [_cell(component["description"]), ""]
            properties = component.get("properties", {})
            if properties:
                required = set(component.get("required", []))
                lines += ["| field | type | required | read-only |", "|---|---|---|---|"]
                for field, spec in properties.items():
                    lines.append(
                        f"| `{field}` | {_cell(_schema_type(spec))} | "
                        f"{'yes' if field in required else 'no'} | "
                        f"{'yes' if spec.get('readOnly') else 'no'} |"
                    )
                lines.append("")
            elif "enum" in component:
                lines += ["Values: " + ", ".join(f"`{v}`" for v in component["enum"]), ""]
    _write("api.md", "\n".join(lines))


SCREENSHOTS = ROOT / "docs" / "_static" / "screenshots"


SCREENSHOT_URI = re.compile(r"_static/screenshots/([\w-]+\.png)$")
MAKE_SCREENSHOTS = (
    "This picture is taken from the running app by a browser test and has not been made on this "
    "machine yet. Make it with `make screenshots` (it needs Chromium: `make chromium` installs "
    "Debian's package, as root), then rebuild with `make docs-only`; `make docs` does both."
)


def _is_old_placeholder(path: Path) -> bool:
    """A grey 640 x 360 placeholder an earlier build wrote (they looked like pictures)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.size == (640, 360) and image.convert("RGB").getpixel((0, 0)) == (
            232,
            232,
            232,
        )


def remove_old_placeholders(app: Sphinx | None) -> None:
    for path in sorted(SCREENSHOTS.glob("*.png")):
        if _is_old_placeholder(path):
            path.unlink()


def _with_literals(text: str) -> nodes.paragraph:
    """A paragraph of ``text`` whose `backticked` parts are code."""
    paragraph = nodes.paragraph()
    for i, part in enumerate(text.split("`")):
        if part:
            paragraph += nodes.literal(text=part) if i % 2 else nodes.Text(part)
    return paragraph


def screenshot_notes(app: Sphinx | None, doctree: nodes.document) -> None:
    """A screenshot the browser test has not made (a fresh clone without Chromium) becomes a
    note saying how to make it, in place of the picture: the build still passes and says so."""
    missing = []
    for image in list(doctree.findall(nodes.image)):
        match = SCREENSHOT_URI.search(image.get("uri", ""))
        if not match or (SCREENSHOTS / match.group(1)).exists():
            continue
        alt = image.get("alt", "") or match.group(1)
        note = nodes.admonition(classes=["screenshot-missing"])
        note += nodes.title(text=f"Screenshot not built: {alt}")
        note += _with_literals(MAKE_SCREENSHOTS)
        parent = image.parent
        if isinstance(parent, nodes.paragraph) and len(parent.children) == 1:
            parent.replace_self(note)
        else:
            image.replace_self(nodes.emphasis(text=f"[{alt}: run make screenshots]"))
        missing.append(match.group(1))
    if missing:
        LOGGER.info("screenshots not built yet (make screenshots): %s", ", ".join(missing))


def tasks_reference() -> None:
    from agent.inspection_tasks import all_tasks, build_prompt, system_prompt
    from agent.parsing import DEFAULT_MAX_TOOL_CALLS

    lines = [
        "# Task definitions and the prompt",
        "",
        "Generated when the docs are built from `agent/inspection_tasks.py` and",
        "`agent/data/tasks.json` (the built-in tasks; `manage.py seed_tasks` refreshes them in the",
        f"database). An episode allows at most {DEFAULT_MAX_TOOL_CALLS} tool calls by default.",
        "",
        "## The system prompt",
        "",
    ]
    lines += _fenced(system_prompt())
    for task in all_tasks():
        lines += [f"## {task.code}: {task.name}", "", _cell(task.question), ""]
        if task.windows:
            lines += [
                "| window | rest range (Å) | kind | lines (Å) | look for |",
                "|---|---|---|---|---|",
            ]
            for window in task.windows:
                low, high = window.rest_range
                listed = ", ".join(f"{line:g}" for line in window.lines)
                lines.append(
                    f"| {_cell(window.name)} | {low:g}-{high:g} | {window.kind} | {listed} "
                    f"| {_cell(window.look_for)} |"
                )
            lines.append("")
        lines += ["The user prompt T0:", ""] + _fenced(build_prompt(task))
    _write("tasks.md", "\n".join(lines))


def formats_reference() -> None:
    import ast

    lines = [
        "# File formats (module by module)",
        "",
        "Generated when the docs are built from the docstring of each reader and writer module.",
        "",
    ]
    for folder, title in (
        ("agent/spectra", "Spectrum files read (and written)"),
        ("agent/formats", "Trajectory data sets read and written"),
    ):
        lines += [f"## {title}", ""]
        for path in sorted((ROOT / folder).glob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text()))
            if path.name == "__init__.py" or not doc:
                continue
            lines += [f"### `{folder}/{path.name}`", ""] + _fenced(doc)
    _write("formats.md", "\n".join(lines))


def generate(app: Sphinx) -> None:
    remove_old_placeholders(app)
    settings_reference()
    _django()
    commands_reference()
    api_reference()
    tasks_reference()
    formats_reference()


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    # Before Sphinx's image collector (priority 500) warns about the missing file.
    app.connect("doctree-read", screenshot_notes, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
