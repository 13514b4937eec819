"""No import circles: the import graph of wattbench's packages, built from their source, has no cycle.

Every `import` and `from ... import` counts, wherever it stands: at module level, inside a function (where circles
hide: they run later, so the circle does not fail at import time, but the two modules still cannot be understood
or moved apart) or under `try`. Only imports under `if TYPE_CHECKING:` are left out, as Python never runs them.
An edge goes to the most specific module the import names: `from a.b import c` reaches the module a.b.c when there
is one, else a.b (its __init__). A parent package that Python also executes on the way is not an edge: a package's
__init__ re-exporting its submodules is not a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the packages and where their source lies: the bench agent and the control plane
PACKAGES = {
    "wattbench_agent": ROOT / "agent" / "wattbench_agent",
    "assets": ROOT / "assets",
    "resources": ROOT / "resources",
    "pipelines": ROOT / "pipelines",
    "wattbench": ROOT / "wattbench",
    "benchmarks": ROOT / "benchmarks",
}

# Cycles left on purpose, each as the sorted tuple of its modules, with the reason.
# Circles allowed by name, each with the reason it cannot go yet (none: the last one, wattbench.connection <->
# wattbench.warehouse, went when the schema and the point statistics left warehouse.py for modules of their own).
ALLOWED: dict[tuple[str, ...], str] = {}


def modules() -> dict[str, Path]:
    """Every module of PACKAGES by its dotted name (a package by its own name, from its __init__.py)."""
    found: dict[str, Path] = {}
    for pkg, base in PACKAGES.items():
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([pkg, *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """The import statements of a module, anywhere in it, except under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, mods: dict[str, Path]) -> str | None:
    """The most specific module of ours that `name` (a dotted path) reaches, or None for a foreign one."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in mods:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = mod.split(".")
                    # a package's own __init__ is its level-1 base; a module's is its parent package
                    drop = node.level - 1 if is_pkg else node.level
                    base = base[: len(base) - drop] if drop else base
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{alias.name}" for alias in node.names if alias.name != "*"] or [prefix]
                # `from a.b import c` where c is a name, not a module, reaches a.b
            for target in targets:
                hit = _known(target, mods)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted by first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        # iterative Tarjan: the graph has a few hundred modules, but recursion depth is not worth the risk
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def a_circle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One circle through a component's first module, as the path of imports (shortest, by breadth-first search)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_the_graph_sees_the_packages():
    graph = import_graph()
    for pkg in PACKAGES:
        assert any(m == pkg or m.startswith(pkg + ".") for m in graph), pkg
    # an import inside a function counts: the agent's CLI imports its subcommands where they run
    assert sum(len(v) for v in graph.values()) > 200


def test_no_import_circles():
    graph = import_graph()
    found = {tuple(c): c for c in cycles(graph)}
    unexplained = [c for key, c in found.items() if key not in ALLOWED]
    lines = [f"{len(c)} modules: {', '.join(c)}\n    e.g. {' -> '.join(a_circle(graph, c))}" for c in unexplained]
    assert not unexplained, f"{len(unexplained)} import circle(s):\n" + "\n".join(lines)
    stale = [key for key in ALLOWED if key not in found]
    assert not stale, f"allowed circles that no longer exist (remove them from ALLOWED): {stale}"


def test_the_product_package_imports_no_part_of_the_code_location():
    # wattbench/ is the domain code that assets/, resources/ and pipelines/ import: never the other way round
    graph = import_graph()
    inward = {
        m: sorted(t for t in targets if t.split(".")[0] in ("assets", "resources", "pipelines"))
        for m, targets in graph.items()
        if m.split(".")[0] == "wattbench"
    }
    assert not {m: t for m, t in inward.items() if t}
    # and no Dagster: what is Dagster's is an asset, a resource or orchestration
    dagster = []
    for mod, path in modules().items():
        if mod.split(".")[0] != "wattbench":
            continue
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            dagster += [f"{mod}: {n}" for n in names if n.split(".")[0].startswith("dagster")]
    assert not dagster


def _reaching(graph: dict[str, set[str]], frm: str, to: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules of package `frm` that import a module of the packages `to`, with those imports."""
    found = {
        m: sorted(t for t in targets if t.split(".")[0] in to) for m, targets in graph.items() if m.split(".")[0] == frm
    }
    return {m: t for m, t in found.items() if t}


def test_resources_import_no_asset_and_no_orchestration():
    # resources/ are the Dagster resources the assets take: what both need is in wattbench/ (a partition:
    # wattbench/partitions.py), never in assets/ or pipelines/
    assert not _reaching(import_graph(), "resources", ("assets", "pipelines"))


def test_assets_import_no_orchestration():
    # pipelines/ builds the code location from the assets (definitions, jobs, sensors, the CLI): never the other way
    assert not _reaching(import_graph(), "assets", ("pipelines",))


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function(tmp_path):
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert a_circle(graph, ["p.a", "p.b", "p.c"]) == ["p.a", "p.b", "p.c", "p.a"]
    # and the parser counts an import inside a function
    src = "def f():\n    from p import b\n    return b\nif TYPE_CHECKING:\n    import p.c\n"
    names = [n.module or n.names[0].name for n in _imports(ast.parse(src))]
    assert names == ["p"]
