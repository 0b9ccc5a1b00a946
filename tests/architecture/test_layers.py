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
DOMAINS = (
    "core",
    "spectra",
    "curation",
    "training_runs",
    "inspections",
    "rating",
    "learning",
    "catalog",
)


def _modules(*folders: str) -> dict[str, Path]:
    found = {}
    for path in sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


MODULES = _modules("annotation")
# Every floor, for the rules that span them (where benchmarks live, what the library imports).
ALL_MODULES = _modules("agent", "training", "annotation", "webapp")


def _imported(node: ast.ImportFrom | ast.Import) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level or not node.module:
        return
    for alias in node.names:
        candidate = f"{node.module}.{alias.name}"
        yield candidate if candidate in ALL_MODULES else node.module


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imported_names(path: Path, *, module_level_only: bool) -> set[str]:
    """Every module name ``path`` imports (third-party ones too): at module level, or anywhere."""
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
    }


def imports_of(path: Path, *, module_level_only: bool) -> set[str]:
    """The annotation modules ``path`` imports: at module level, or anywhere in it."""
    return imported_names(path, module_level_only=module_level_only) & MODULES.keys()


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


def test_it_closes_loops_only_through_a_task_its_job_and_the_services() -> None:
    """With a task's in-body import of its job counted, every loop is exactly services -> task
    -> job -> services: services enqueue the task, the task runs the job, the job calls the
    services (issue 34: the reproduction check made it four, importing the services for two pure
    functions; then the job's episodes in flight did, writing through the services; they write
    through ``inspections.recording`` now, which sends no task)."""
    for loop in cycles(import_graph(module_level_only=False)):
        domain = loop[0].rsplit(".", 1)[0]
        assert loop == [f"{domain}.jobs", f"{domain}.services", f"{domain}.tasks"], loop


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


# --- where benchmarks live ----------------------------------------------------------------------
# Benchmark and load-test code has one home per side: agent/bench/ (plain Python, no Django),
# annotation/bench/ (the site's) and training/bench/ (the training recipe's, which drives
# training.sft and training.grpo that agent/ may not import). Benchmarks import the library they measure; the library never
# imports a benchmark; the bench_* and loadtest management commands are entry points into
# annotation/bench/.

BENCH_HOMES = ("agent.bench", "annotation.bench", "training.bench")
COMMANDS = "annotation.management.commands."


def in_bench_home(module: str) -> bool:
    return any(module == home or module.startswith(home + ".") for home in BENCH_HOMES)


def looks_like_a_benchmark(module: str) -> bool:
    leaf = module.rsplit(".", 1)[-1]
    return leaf.startswith("bench") or leaf.endswith("_bench") or "loadtest" in leaf


def is_bench_command(module: str) -> bool:
    return module.startswith(COMMANDS) and looks_like_a_benchmark(module)


def test_it_recognises_benchmark_modules_and_their_homes() -> None:
    assert looks_like_a_benchmark("agent.bench_render")
    assert looks_like_a_benchmark("agent.real_bench")
    assert looks_like_a_benchmark("annotation.loadtest")
    assert not looks_like_a_benchmark("agent.synthetic.writer")
    assert not looks_like_a_benchmark("annotation.management.commands.make_benchmark")
    assert in_bench_home("agent.bench.render") and in_bench_home("annotation.bench")
    assert not in_bench_home("agent.benchmarks") and not in_bench_home("agent.render")


@pytest.mark.parametrize("module", sorted(ALL_MODULES))
def test_it_keeps_benchmarks_in_their_home(module: str) -> None:
    if looks_like_a_benchmark(module) and not is_bench_command(module):
        assert in_bench_home(module), (
            f"{module} is benchmark code outside agent/bench, annotation/bench"
        )


@pytest.mark.parametrize("module", sorted(m for m in ALL_MODULES if is_bench_command(m)))
def test_it_keeps_bench_commands_entry_points_into_annotation_bench(module: str) -> None:
    imported = imported_names(ALL_MODULES[module], module_level_only=True)
    assert {name for name in imported if in_bench_home(name)}, f"{module} holds its own benchmark"


@pytest.mark.parametrize(
    "module", sorted(m for m in ALL_MODULES if not in_bench_home(m) and not is_bench_command(m))
)
def test_it_keeps_the_library_from_importing_benchmarks(module: str) -> None:
    imported = imported_names(ALL_MODULES[module], module_level_only=False)
    benchmarks = {name for name in imported if in_bench_home(name)}
    assert not benchmarks, f"{module} imports a benchmark: {sorted(benchmarks)}"


@pytest.mark.parametrize("module", sorted(m for m in ALL_MODULES if m.startswith("agent.")))
def test_it_keeps_the_agent_floor_and_its_benchmarks_free_of_django(module: str) -> None:
    imported = imported_names(ALL_MODULES[module], module_level_only=False)
    roots = {name.split(".", 1)[0] for name in imported}
    assert not roots & {"django", "rest_framework", "celery", "annotation", "webapp", "training"}


def test_it_has_no_import_cycle_among_benchmarks_even_inside_functions() -> None:
    bench = [m for m in ALL_MODULES if in_bench_home(m)]
    assert bench, "no benchmark modules found: were they moved without updating BENCH_HOMES?"
    graph = {
        module: {
            name
            for name in imported_names(ALL_MODULES[module], module_level_only=False)
            if in_bench_home(name) and name in ALL_MODULES
        }
        - {module}
        for module in bench
    }
    assert cycles(graph) == []


# --- production never imports the tests ---------------------------------------------------------


def imports_tests(path: Path) -> set[str]:
    """The ``tests`` modules ``path`` imports, at module level or inside a function."""
    imported = imported_names(path, module_level_only=False)
    return {name for name in imported if name == "tests" or name.startswith("tests.")}


def test_it_sees_an_import_of_the_tests_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "builder.py"
    module.write_text("def build():\n    from tests.agent.helpers import make\n    return make()\n")
    assert imports_tests(module) == {"tests.agent.helpers"}
    module.write_text("import tests.factories\nfrom agent.testing import tests_of\n")
    assert imports_tests(module) == {"tests.factories"}


@pytest.mark.parametrize("module", sorted(ALL_MODULES))
def test_it_keeps_production_code_from_importing_the_tests(module: str) -> None:
    assert not imports_tests(ALL_MODULES[module]), f"{module} imports the test package"
