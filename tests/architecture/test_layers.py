"""The house rules of ARCHITECTURE.md, checked on the source: no import cycle, domains layered.

The import graph is read from the code with ``ast`` (nothing is imported), so a new cycle or an
import of a higher domain fails here before it confuses anyone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# From the ground up; a domain may import core and the domains before it, never one after it.
DOMAINS = ("core", "spectra", "curation", "training_runs", "inspections", "rating", "catalog")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "annotation").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


MODULES = _modules()


def _imported(node: ast.ImportFrom | ast.Import) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level or not node.module:
        return
    for alias in node.names:
        candidate = f"{node.module}.{alias.name}"
        yield candidate if candidate in MODULES else node.module


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, *, module_level_only: bool) -> set[str]:
    """The annotation modules ``path`` imports: at module level, or anywhere in it."""
    tree = ast.parse(path.read_text())
    nodes: list[ast.AST]
    if module_level_only:
        nodes = [
            node
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            or (isinstance(node, ast.If) and not _is_type_checking(node))
        ]
        nodes = [inner for node in nodes for inner in ast.walk(node)]
    else:
        nodes = list(ast.walk(tree))
    return {
        name
        for node in nodes
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in _imported(node)
        if name in MODULES
    }


def import_graph(*, module_level_only: bool) -> dict[str, set[str]]:
    return {
        name: imports_of(path, module_level_only=module_level_only) - {name}
        for name, path in MODULES.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def domain_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in DOMAINS else None


def test_it_finds_a_cycle_when_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_it_has_no_import_cycle_at_module_level() -> None:
    assert cycles(import_graph(module_level_only=True)) == []


def test_it_has_no_import_cycle_even_through_imports_inside_functions() -> None:
    """The only import that may close a loop is a Celery task importing its job in its body
    (services enqueue tasks; tasks run jobs; jobs call services)."""
    graph = import_graph(module_level_only=False)
    for module in graph:
        if module.endswith(".tasks") or module == "annotation.apps":
            graph[module] = imports_of(MODULES[module], module_level_only=True) - {module}
    assert cycles(graph) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if domain_of(m)))
def test_it_imports_no_higher_domain(module: str) -> None:
    rank = DOMAINS.index(domain_of(module) or "")
    higher = sorted(
        imported
        for imported in imports_of(MODULES[module], module_level_only=False)
        if (other := domain_of(imported)) and DOMAINS.index(other) > rank
    )
    assert higher == [], f"{module} imports a higher domain"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if domain_of(m) == "core"))
def test_it_keeps_core_free_of_domains_and_the_cross_domain_modules(module: str) -> None:
    imported = imports_of(MODULES[module], module_level_only=False)
    assert not {m for m in imported if domain_of(m) not in (None, "core")}
    assert not imported & {"annotation.models", "annotation.blinding"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.endswith((".views", ".apis"))))
def test_it_keeps_views_and_apis_siblings(module: str) -> None:
    other = ".apis" if module.endswith(".views") else ".views"
    imported = imports_of(MODULES[module], module_level_only=False)
    assert not {m for m in imported if m.endswith((other, other + "_editor"))}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.endswith(".selectors")))
def test_it_keeps_selectors_read_only(module: str) -> None:
    imported = imports_of(MODULES[module], module_level_only=False)
    assert not {m for m in imported if m.endswith(".services")}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_it_keeps_every_module_under_800_lines(module: str) -> None:
    assert len(MODULES[module].read_text().splitlines()) <= 800


@pytest.mark.parametrize(
    "path",
    sorted(
        str(path.relative_to(ROOT))
        for folder in ("agent", "training", "webapp")
        for path in (ROOT / folder).rglob("*.py")
    ),
)
def test_it_keeps_the_other_floors_under_800_lines_too(path: str) -> None:
    assert len((ROOT / path).read_text().splitlines()) <= 800
