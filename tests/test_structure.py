"""Structure rules for the repository, checked on its source with ``ast``.

The whole repository (every top-level package: gateway, engines, evals, deploy, tests):

* the top-level packages import each other only downwards in the order that
  docs/architecture.md states (so no two import each other);
* no module in ``SIZE_CHECKED`` over ``MAX_MODULE_LINES`` lines, unless docs/architecture.md
  lists it (or its folder) with a reason; a listed module that is not over the limit fails.

The ``gateway`` package:

* its packages import each other only downwards in the package map of docs/architecture.md;
* no function or method over ``MAX_FUNCTION_LINES`` lines or ``MAX_PARAMS`` parameters;
* no import cycle among gateway modules (imports inside functions and under
  ``if TYPE_CHECKING:`` count: a type that needs its user back is a cycle too);
* no module-level mutable state: no ``global`` statement, no module-level list/dict/set;
* the data plane (server, dispatch, upstream, core) never imports the control plane (admin).

Every failure names the offending ``file:line``.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gateway"

MAX_MODULE_LINES = 400
SIZE_CHECKED = ("gateway", "engines", "evals", "deploy")
MAX_FUNCTION_LINES = 60
MAX_PARAMS = 6
DATA_PLANE = (
    "gateway.server",
    "gateway.dispatch",
    "gateway.upstream",
    "gateway.routing",
    "gateway.request",
    "gateway.rules",
    "gateway.telemetry",
    "gateway.access",
    "gateway.store",
    "gateway.tenancy",
    "gateway.checks",
)
CONTROL_PLANE = "gateway.admin"
MUTABLE_LITERALS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MUTABLE_FACTORIES = frozenset({"list", "dict", "set"})

Offender = str  # "path:line: what is wrong"


@dataclass(frozen=True)
class Module:
    name: str
    """Dotted name; a package is named by its ``__init__``: ``gateway.checks``."""
    path: str
    """Relative to the repository root, for messages."""
    is_package: bool
    lines: int
    tree: ast.Module

    def at(self, node: ast.AST | int) -> str:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        return f"{self.path}:{line}"


def parse_module(name: str, path: str, source: str, is_package: bool = False) -> Module:
    tree = ast.parse(source, filename=path)
    return Module(name, path, is_package, len(source.splitlines()), tree)


def load_package(root: Path, package: str) -> tuple[Module, ...]:
    modules = []
    for file in sorted((root / package).rglob("*.py")):
        rel = file.relative_to(root)
        parts = rel.with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules.append(parse_module(name, rel.as_posix(), file.read_text("utf-8"), is_package))
    return tuple(modules)


# --------------------------------------------------------------------------------------------
# Imports
# --------------------------------------------------------------------------------------------


def import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``: in functions and under ``if TYPE_CHECKING:``
    too."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    for child in ast.iter_child_nodes(node):
        yield from import_nodes(child)


def _base_of_relative(mod: Module, level: int, target: str | None) -> str:
    package = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    base = package[: len(package) - level + 1]
    return ".".join([*base, target] if target else base)


def imported_names(mod: Module, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """Dotted names an import statement may load: ``from a.b import c`` gives ``a.b.c``
    (a module, when it is one) and ``a.b``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    source = node.module or ""
    if node.level:
        source = _base_of_relative(mod, node.level, node.module)
    for alias in node.names:
        yield f"{source}.{alias.name}"
    yield source


def resolve(name: str, known: frozenset[str]) -> str | None:
    """The gateway module ``name`` refers to: itself, else its nearest known parent."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def module_imports(mod: Module, known: frozenset[str]) -> dict[str, int]:
    """Gateway modules imported by ``mod`` -> line of the first such import."""
    found: dict[str, int] = {}
    for node in import_nodes(mod.tree):
        names = list(imported_names(mod, node))
        if isinstance(node, ast.ImportFrom):
            # ``from x import y``: the module x.y when it is one, else x itself.
            *members, source = names
            targets = [m if m in known else source for m in members]
        else:
            targets = names
        for target in targets:
            resolved = resolve(target, known)
            if resolved is not None and resolved != mod.name:
                found.setdefault(resolved, node.lineno)
    return found


def import_graph(modules: tuple[Module, ...]) -> dict[str, dict[str, int]]:
    known = frozenset(m.name for m in modules)
    return {m.name: module_imports(m, known) for m in modules}


def _strongly_connected(graph: Mapping[str, Mapping[str, object]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of two or more modules only."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _cycle_through(graph: Mapping[str, Mapping[str, object]], members: list[str]) -> list[str]:
    """A shortest cycle from the first member back to itself, within the component."""
    inside = set(members)
    start = members[0]
    parent: dict[str, str] = {}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt in inside and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def import_cycles(modules: tuple[Module, ...]) -> list[Offender]:
    graph = import_graph(modules)
    paths = {m.name: m.path for m in modules}
    offenders = []
    for members in _strongly_connected(graph):
        cycle = _cycle_through(graph, members)
        steps = [f"{paths[a]}:{graph[a][b]} imports {b}" for a, b in itertools.pairwise(cycle)]
        offenders.append("import cycle: " + " -> ".join(steps))
    return offenders


# --------------------------------------------------------------------------------------------
# Per-module rules
# --------------------------------------------------------------------------------------------


def count_params(args: ast.arguments) -> int:
    positional = [*args.posonlyargs, *args.args]
    if positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    extra = (args.vararg is not None) + (args.kwarg is not None)
    return len(positional) + len(args.kwonlyargs) + extra


def function_size(mod: Module) -> list[Offender]:
    offenders = []
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > MAX_FUNCTION_LINES:
            offenders.append(f"{mod.at(node)}: {node.name}() is {lines} lines")
        params = count_params(node.args)
        if params > MAX_PARAMS:
            offenders.append(f"{mod.at(node)}: {node.name}() takes {params} parameters")
    return offenders


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import time: the body, including module-level if/try/with/for
    blocks, but not function or class bodies."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(stmt, field, []))
        for handler in getattr(stmt, "handlers", []):
            yield from _module_level(handler.body)


def is_mutable_value(value: ast.expr | None) -> bool:
    if isinstance(value, MUTABLE_LITERALS):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in MUTABLE_FACTORIES
    )


def mutable_state(mod: Module) -> list[Offender]:
    offenders = [
        f"{mod.at(node)}: 'global {', '.join(node.names)}' statement"
        for node in ast.walk(mod.tree)
        if isinstance(node, ast.Global)
    ]
    for stmt in _module_level(mod.tree.body):
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign) and is_mutable_value(
            stmt.value
        ):
            kind = type(stmt.value).__name__
            offenders.append(f"{mod.at(stmt)}: module-level mutable {kind}")
    return offenders


def plane_separation(mod: Module) -> list[Offender]:
    """Data-plane modules never import the control plane, not even for type checking."""
    if not mod.name.startswith(tuple(p + "." for p in DATA_PLANE)) and mod.name not in DATA_PLANE:
        return []
    offenders = []
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for name in imported_names(mod, node):
            if name == CONTROL_PLANE or name.startswith(CONTROL_PLANE + "."):
                offenders.append(f"{mod.at(node)}: data plane imports {name}")
                break
    return offenders


RULES: MappingProxyType[str, Callable[[Module], list[Offender]]] = MappingProxyType(
    {
        "function_size": function_size,
        "mutable_state": mutable_state,
        "plane_separation": plane_separation,
    }
)


def top_level_packages(root: Path) -> tuple[str, ...]:
    """The repository's top-level packages: its folders with an ``__init__.py``."""
    return tuple(sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file()))


REPOSITORY = tuple(m for top in top_level_packages(ROOT) for m in load_package(ROOT, top))
MODULES = tuple(m for m in REPOSITORY if m.name.split(".")[0] == PACKAGE)


# --------------------------------------------------------------------------------------------
# The rules on the gateway package
# --------------------------------------------------------------------------------------------


def test_the_package_is_found() -> None:
    names = {m.name for m in MODULES}
    assert {"gateway", "gateway.checks.base", "gateway.server.app"} <= names


@pytest.mark.parametrize("rule", sorted(RULES))
def test_gateway_follows(rule: str) -> None:
    offenders = [o for mod in MODULES for o in RULES[rule](mod)]
    assert not offenders, f"{rule}:\n" + "\n".join(offenders)


def test_no_import_cycles() -> None:
    offenders = import_cycles(MODULES)
    assert not offenders, "\n".join(offenders)


def package_of(name: str) -> str:
    """The unit of the package rule: ``gateway.<sub>`` for everything under a sub-package,
    a top-level module (``gateway.errors``) for itself."""
    return ".".join(name.split(".")[:2])


def package_graph(modules: tuple[Module, ...]) -> dict[str, dict[str, str]]:
    """``gateway.<sub>`` -> packages it imports -> ``path:line`` of the first such import;
    imports inside one package dropped."""
    graph: dict[str, dict[str, str]] = {package_of(m.name): {} for m in modules}
    paths = {m.name: m.path for m in modules}
    for name, targets in sorted(import_graph(modules).items()):
        src = package_of(name)
        for target, line in targets.items():
            dst = package_of(target)
            if dst != src and dst != PACKAGE:
                graph[src].setdefault(dst, f"{paths[name]}:{line}")
    return graph


def package_cycles(modules: tuple[Module, ...]) -> list[Offender]:
    graph = package_graph(modules)
    return [
        "package cycle: " + " -> ".join(_cycle_through(graph, members))
        for members in _strongly_connected(graph)
    ]


def test_no_import_cycles_between_packages() -> None:
    offenders = package_cycles(MODULES)
    assert not offenders, "\n".join(offenders)


# --------------------------------------------------------------------------------------------
# The rules themselves, on small sources
# --------------------------------------------------------------------------------------------

LONG_BODY = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))


@pytest.mark.parametrize(
    ("rule", "source", "expected"),
    [
        ("function_size", f"def f():\n{LONG_BODY[: LONG_BODY.rfind(chr(10))]}\n", 0),
        ("function_size", f"def f():\n{LONG_BODY}\n", 1),
        ("function_size", "class C:\n    def m(self, a, b, c, d, e, f): ...\n", 0),
        ("function_size", "class C:\n    def m(self, a, b, c, d, e, f, g): ...\n", 1),
        ("function_size", "def f(a, /, b, *args, c, d, **kw): ...\n", 0),
        ("function_size", "def f(a, /, b, *args, c, d, e, **kw): ...\n", 1),
        ("function_size", "async def f(self, a, b, c, d, e, g): ...\n", 0),
        ("mutable_state", "X = (1, 2)\nY = frozenset({1})\nZ = MappingProxyType({})\n", 0),
        ("mutable_state", "X = [1]\n", 1),
        ("mutable_state", "X: dict[str, int] = {}\n", 1),
        ("mutable_state", "X = {i for i in range(3)}\n", 1),
        ("mutable_state", "X = dict(a=1)\n", 1),
        ("mutable_state", "try:\n    X = list()\nexcept ImportError:\n    X = set()\n", 2),
        ("mutable_state", "def f():\n    global X\n    X = []\n", 1),
        ("mutable_state", "class C:\n    items = []\n", 0),
        ("plane_separation", "from gateway.admin import routes\n", 1),
        ("plane_separation", "def f():\n    import gateway.admin.routes\n", 1),
        ("plane_separation", "from gateway.store import base as store\n", 0),
    ],
)
def test_rule_on_source(rule: str, source: str, expected: int) -> None:
    mod = parse_module("gateway.routing.sample", "gateway/routing/sample.py", source)
    offenders = RULES[rule](mod)
    assert len(offenders) == expected, offenders
    assert all(o.startswith("gateway/routing/sample.py:") for o in offenders)


def _package(sources: dict[str, str]) -> tuple[Module, ...]:
    return tuple(
        parse_module(
            name.removesuffix(".__init__"),
            name.replace(".", "/") + ".py",
            source,
            name.endswith("__init__"),
        )
        for name, source in sources.items()
    )


@pytest.mark.parametrize(
    ("sources", "cycle"),
    [
        (
            {"g.__init__": "", "g.a": "from g import b\n", "g.b": "x = 1\n"},
            "",
        ),
        (
            {"g.__init__": "", "g.a": "from g.b import x\n", "g.b": "def f():\n    import g.a\n"},
            "g/a.py:1 imports g.b -> g/b.py:2 imports g.a",
        ),
        (
            {
                "g.__init__": "",
                "g.a": "import typing\nif typing.TYPE_CHECKING:\n    from g.b import x\n",
                "g.b": "from g.a import y\n",
            },
            "g/a.py:3 imports g.b -> g/b.py:1 imports g.a",
        ),
        (
            {"g.__init__": "", "g.a": "from . import b\n", "g.b": "from .a import y\n"},
            "g/a.py:1 imports g.b -> g/b.py:1 imports g.a",
        ),
        (
            {
                "g.__init__": "",
                "g.p.__init__": "",
                "g.p.a": "from ..c import z\n",
                "g.c": "import g.p.a as pa\n",
            },
            "g/c.py:1 imports g.p.a -> g/p/a.py:1 imports g.c",
        ),
    ],
)
def test_import_cycles_on_source(sources: dict[str, str], cycle: str) -> None:
    offenders = import_cycles(_package(sources))
    assert offenders == ([f"import cycle: {cycle}"] if cycle else [])


@pytest.mark.parametrize(
    ("sources", "cycle"),
    [
        (
            {
                "g.__init__": "",
                "g.p.__init__": "",
                "g.p.a": "from g.q.b import x\n",
                "g.q.__init__": "",
                "g.q.b": "x = 1\n",
                "g.q.c": "from g.p.a import y\n",
            },
            "g.p -> g.q -> g.p",
        ),
        (
            {
                "g.__init__": "",
                "g.p.__init__": "",
                "g.p.a": "from g.q.b import x\n",
                "g.q.__init__": "",
                "g.q.b": "from g.r import z\n",
                "g.r": "z = 1\n",
            },
            "",
        ),
    ],
)
def test_package_cycles_on_source(sources: dict[str, str], cycle: str) -> None:
    offenders = package_cycles(_package(sources))
    assert offenders == ([f"package cycle: {cycle}"] if cycle else [])


# --------------------------------------------------------------------------------------------
# docs/architecture.md: the package map is the layering the code follows
# --------------------------------------------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def marked_block(text: str, marker: str) -> str:
    """What lies between ``<!-- marker: begin -->`` and ``<!-- marker: end -->``."""
    return text.split(f"<!-- {marker}: begin -->", 1)[1].split(f"<!-- {marker}: end -->", 1)[0]


def read_layers(text: str, marker: str = "layers", prefix: str = f"{PACKAGE}.") -> list[list[str]]:
    """A map's lines, top (highest) first: each a list of ``<prefix><name>``."""
    lines = [ln.strip() for ln in marked_block(text, marker).splitlines()]
    return [[f"{prefix}{n}" for n in ln.split()] for ln in lines if ln and "```" not in ln]


def layering_offenders(
    layers: list[list[str]], graph: Mapping[str, Mapping[str, object]]
) -> list[Offender]:
    """Every import that does not go down the map (with where it is), every package missing
    from the map, every name in the map that is no package."""
    rank = {name: len(layers) - i for i, line in enumerate(layers) for name in line}
    offenders = [f"{name}: not in the package map" for name in sorted(graph) if name not in rank]
    offenders += [f"{name}: in the map, not in the code" for name in rank if name not in graph]
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if src in rank and dst in rank and rank[dst] >= rank[src]:
                offenders.append(
                    f"{src} imports {dst}, which is not below it in the map ({targets[dst]})"
                )
    return offenders


def test_architecture_page_matches_the_code() -> None:
    text = ARCHITECTURE.read_text("utf-8")
    graph = {k: v for k, v in package_graph(MODULES).items() if k != PACKAGE}
    offenders = layering_offenders(read_layers(text), graph)
    paths = sorted(set(re.findall(r"`(gateway/[\w/]+\.py)`", text)))
    offenders += [
        f"{p}: named in the walk, does not exist" for p in paths if not (ROOT / p).exists()
    ]
    assert paths, "the walk names no module"
    assert not offenders, "docs/architecture.md:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("layers", "graph", "expected"),
    [
        ([["g.a"], ["g.b"]], {"g.a": {"g.b": 1}, "g.b": {}}, []),
        ([["g.a"], ["g.b"]], {"g.a": {}, "g.b": {"g.a": 1}}, ["g.b imports g.a"]),
        ([["g.a", "g.b"]], {"g.a": {"g.b": 1}, "g.b": {}}, ["g.a imports g.b"]),
        ([["g.a"]], {"g.a": {}, "g.c": {}}, ["g.c: not in the package map"]),
        ([["g.a"], ["g.z"]], {"g.a": {}}, ["g.z: in the map"]),
    ],
)
def test_layering_rule(
    layers: list[list[str]], graph: dict[str, dict[str, int]], expected: list[str]
) -> None:
    offenders = layering_offenders(layers, graph)
    assert [o.split(",")[0] for o in offenders] == expected


def test_read_layers() -> None:
    text = "x\n<!-- layers: begin -->\n```text\na  b\nc\n```\n<!-- layers: end -->\n"
    assert read_layers(text) == [["gateway.a", "gateway.b"], ["gateway.c"]]


# --------------------------------------------------------------------------------------------
# The whole repository: the top-level order and the size of every module
# --------------------------------------------------------------------------------------------


def top_level_graph(modules: tuple[Module, ...]) -> dict[str, dict[str, str]]:
    """Top-level package -> top-level packages it imports -> ``path:line`` of the first such
    import (imports in functions and under ``if TYPE_CHECKING:`` count)."""
    tops = sorted({m.name.split(".")[0] for m in modules})
    graph: dict[str, dict[str, str]] = {top: {} for top in tops}
    for mod in modules:
        src = mod.name.split(".")[0]
        for node in import_nodes(mod.tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # relative: inside its own package
            for name in imported_names(mod, node):
                dst = name.split(".")[0]
                if dst in graph and dst != src:
                    graph[src].setdefault(dst, mod.at(node))
    return graph


def test_top_level_packages_import_only_downwards() -> None:
    graph = top_level_graph(REPOSITORY)
    assert {"gateway", "engines", "evals", "deploy", "tests"} <= set(graph)
    layers = read_layers(ARCHITECTURE.read_text("utf-8"), "top-level", prefix="")
    offenders = layering_offenders(layers, graph)
    offenders += [
        "top-level import cycle: " + " -> ".join(_cycle_through(graph, members))
        for members in _strongly_connected(graph)
    ]
    assert not offenders, "docs/architecture.md, top-level packages:\n" + "\n".join(offenders)


SIZE_EXCEPTION_ROW = re.compile(r"^\|\s*`(?P<path>[\w./-]+)`\s*\|\s*(?P<why>.*?)\s*\|$")


def size_exceptions(text: str, marker: str) -> dict[str, str]:
    """The table in a marked block: module path (or folder, ending in ``/``) -> why."""
    rows = (SIZE_EXCEPTION_ROW.match(ln.strip()) for ln in marked_block(text, marker).splitlines())
    return {m["path"]: m["why"] for m in rows if m is not None}


def _covers(entry: str, path: str) -> bool:
    return path == entry or (entry.endswith("/") and path.startswith(entry))


def size_offenders(modules: tuple[Module, ...], exceptions: Mapping[str, str]) -> list[Offender]:
    """Modules over the limit that no entry covers; entries without a reason, or that cover
    no module over the limit (take them off the list)."""
    over = {m.path: m.lines for m in modules if m.lines > MAX_MODULE_LINES}
    offenders = [
        f"{path}:1: {lines} lines (max {MAX_MODULE_LINES}; split it, or list it with a reason "
        "under 'Modules over 400 lines' in docs/architecture.md)"
        for path, lines in sorted(over.items())
        if not any(_covers(entry, path) for entry in exceptions)
    ]
    for entry, why in exceptions.items():
        if not why:
            offenders.append(f"docs/architecture.md: {entry} is listed without a reason")
        if not any(_covers(entry, path) for path in over):
            offenders.append(
                f"docs/architecture.md: {entry} is listed as over {MAX_MODULE_LINES} lines and "
                "is not: take it off the list"
            )
    return offenders


def test_no_module_over_the_size_limit() -> None:
    text = ARCHITECTURE.read_text("utf-8")
    exceptions = {
        **size_exceptions(text, "size-exceptions"),
        **size_exceptions(text, "size-exceptions-temporary"),
    }
    checked = tuple(m for m in REPOSITORY if m.name.split(".")[0] in SIZE_CHECKED)
    offenders = size_offenders(checked, exceptions)
    assert not offenders, "module size:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("sources", "edges"),
    [
        ({"a.m": "import b.x\n", "b.x": "from . import y\n", "b.y": ""}, {"a": {"b": "a/m.py:1"}}),
        ({"a.m": "def f():\n    from b import x\n", "b.x": ""}, {"a": {"b": "a/m.py:2"}}),
        ({"a.m": "import os\nimport bx\n", "b.x": "from a import m\n"}, {"b": {"a": "b/x.py:1"}}),
    ],
)
def test_top_level_graph_on_source(
    sources: dict[str, str], edges: dict[str, dict[str, str]]
) -> None:
    graph = top_level_graph(_package(sources))
    assert {src: dst for src, dst in graph.items() if dst} == edges


@pytest.mark.parametrize(
    ("lines", "exceptions", "expected"),
    [
        ({"g/a.py": 400, "g/b.py": 10}, {}, []),
        ({"g/a.py": 401}, {}, ["g/a.py:1: 401 lines"]),
        ({"g/a.py": 401}, {"g/a.py": "data"}, []),
        ({"g/d/a.py": 900, "g/d/b.py": 2}, {"g/d/": "data"}, []),
        ({"g/a.py": 401}, {"g/a.py": ""}, ["docs/architecture.md: g/a.py is listed without"]),
        ({"g/a.py": 12}, {"g/a.py": "big"}, ["docs/architecture.md: g/a.py is listed as over"]),
        ({"g/d/a.py": 2}, {"g/d/": "data"}, ["docs/architecture.md: g/d/ is listed as over"]),
        ({"g/dx.py": 401}, {"g/d": "no slash"}, ["g/dx.py:1:", "docs/architecture.md: g/d is"]),
    ],
)
def test_size_rule(lines: dict[str, int], exceptions: dict[str, str], expected: list[str]) -> None:
    modules = tuple(
        parse_module(path.removesuffix(".py").replace("/", "."), path, "x = 1\n" * n)
        for path, n in lines.items()
    )
    offenders = size_offenders(modules, exceptions)
    assert len(offenders) == len(expected), offenders
    assert all(o.startswith(e) for o, e in zip(offenders, expected, strict=True)), offenders


def test_size_exceptions_are_read_from_a_table() -> None:
    text = (
        "<!-- s: begin -->\n| module | why |\n|---|---|\n| `evals/data/` | data as code |\n"
        "| `engines/x.py` |  |\n<!-- s: end -->\n| `outside.py` | not read |\n"
    )
    assert size_exceptions(text, "s") == {"evals/data/": "data as code", "engines/x.py": ""}
