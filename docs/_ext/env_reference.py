"""Every environment variable the code reads, found in the source with ``ast`` (nothing is
imported), beside what docs/reference/settings.toml says it means.

The settings reference page is generated from this at build time, and both the docs build and
tests/docs/test_settings_reference.py fail when a variable is read but not described, or
described but no longer read, so the page cannot drift from the code.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOORS = ("webapp", "annotation", "agent", "training")
MEANINGS = ROOT / "docs" / "reference" / "settings.toml"
# webapp/settings.py's helpers: name -> the default each uses when the call gives none.
SETTINGS_HELPERS = {"envbool": "'False'", "envint": None, "envlist": "''", "envsecret": "''"}
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)


@dataclass
class EnvRead:
    name: str
    default: str | None  # the default's source text; None: no default (required or optional)
    where: list[str] = field(default_factory=list)  # "webapp/settings.py:115"


def _default_text(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    text = ast.unparse(node)
    if all(isinstance(part, _ARITHMETIC) for part in ast.walk(node)):
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})
        if repr(value) != text:
            return f"{value!r} ({text})"
    return text


def _is_os_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _reads_in(tree: ast.AST) -> Iterator[tuple[str, str | None, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                yield key.value, None, node.lineno
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        func = node.func
        default = node.args[1] if len(node.args) > 1 else None
        if isinstance(func, ast.Attribute) and (
            func.attr == "getenv" or (func.attr == "get" and _is_os_environ(func.value))
        ):
            yield first.value, _default_text(default), node.lineno
        elif isinstance(func, ast.Name) and func.id in SETTINGS_HELPERS:
            text = _default_text(default) if default is not None else SETTINGS_HELPERS[func.id]
            yield first.value, text, node.lineno
            if func.id == "envsecret":
                yield f"{first.value}_FILE", None, node.lineno


def env_reads(paths: Iterable[Path] | None = None) -> dict[str, EnvRead]:
    """Variable name -> its default and every place the code reads it."""
    if paths is None:
        paths = sorted(p for floor in FLOORS for p in (ROOT / floor).rglob("*.py"))
    found: dict[str, EnvRead] = {}
    for path in paths:
        relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for name, default, line in _reads_in(ast.parse(path.read_text(), str(path))):
            read = found.setdefault(name, EnvRead(name, default))
            if read.default is None:
                read.default = default
            read.where.append(f"{relative}:{line}")
    return found


def meanings(path: Path = MEANINGS) -> dict[str, dict[str, str]]:
    """Variable name -> {"group", "meaning"[, "dynamic"]} from docs/reference/settings.toml;
    "dynamic" says where a variable whose name the code builds at run time is read."""
    return tomllib.loads(path.read_text())


def drift(reads: dict[str, EnvRead], described: dict[str, dict[str, str]]) -> list[str]:
    """What is wrong between the code and the descriptions, one sentence each."""
    problems = [
        f"{name} is read at {', '.join(reads[name].where)} but not described in {MEANINGS.name}"
        for name in sorted(reads.keys() - described.keys())
    ]
    problems += [
        f"{name} is described in {MEANINGS.name} but no code reads it any more"
        for name in sorted(described.keys() - reads.keys())
        if not described[name].get("dynamic")
    ]
    problems += [
        f"{name} in {MEANINGS.name} needs a 'group' and a 'meaning'"
        for name, entry in sorted(described.items())
        if not entry.get("group") or not entry.get("meaning")
    ]
    return problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_page(reads: dict[str, EnvRead], described: dict[str, dict[str, str]]) -> str:
    """The reference page, in MyST Markdown: one table per group, variables in code order."""
    lines = [
        "# Settings (environment variables)",
        "",
        "Generated when the docs are built: the variables and defaults are read from the code",
        "(`docs/_ext/env_reference.py`), the meanings from `docs/reference/settings.toml`; the",
        "build fails when a variable is read but not described or described but not read.",
        "One settings module, `webapp/settings.py`, reads most of them; a few are read where",
        "they are used (the first column says where).",
        "",
    ]
    groups: dict[str, list[str]] = {}
    for name in described:
        if name in reads or described[name].get("dynamic"):
            groups.setdefault(described[name]["group"], []).append(name)
    for group, names in groups.items():
        lines += [f"## {group}", "", "| variable, default in the code, read in | meaning |"]
        lines.append("|---|---|")
        for name in names:
            read = reads.get(name, EnvRead(name, None))
            default = f"`{_cell(read.default)}`" if read.default is not None else "(none)"
            where = "<br>".join(f"`{place}`" for place in read.where) or _cell(
                described[name]["dynamic"]
            )
            lines.append(
                f"| `{name}`<br>default: {default}<br>{where} | {_cell(described[name]['meaning'])} |"
            )
        lines.append("")
    return "\n".join(lines)
