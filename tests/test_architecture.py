"""The package's import graph: no load-time cycles, and imports point down the layers.

The graph is built statically: every module under ``rlframe/`` is parsed with
``ast``; ``import rlframe.x`` and ``from rlframe.x import y`` (relative forms
resolved, ``y`` taken as a module where it is a submodule) become edges.
Imports at module level (including inside module-level ``if``/``try``) form the
load-time graph, which must have no cycle. Imports inside a function body are
deliberate lazy imports and imports under ``if TYPE_CHECKING:`` never run: neither
can form a load-time cycle, yet both must still point down the layers, and no
two modules may lean on each other through them either (a circle that only a
lazy or a type-only import closes is still one design split across files).
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "rlframe"

# The layers, lowest first. Each layer holds one or more units; a unit is a
# tuple of dotted prefixes under ``rlframe`` (the longest matching prefix
# places a module). A module may import its own unit and any unit of a lower
# layer; units side by side in one layer are peers and must not import each
# other.
LAYERS: tuple[tuple[tuple[str, ...], ...], ...] = (
    # Helpers with no knowledge of RL roles: collections, buffers, logging,
    # seeding, CPU pinning and the experiment launcher (which starts scripts
    # as subprocesses and imports nothing above utils).
    (("utils",),),
    # Building blocks that know only utils.
    (("spaces",), ("distributions",), ("models",)),
    # The env interface, the gymnasium adapter, vector envs, Atari.
    (("envs",),),
    # Model + distribution + action selection.
    (("agents",),),
    # Replay buffers (their layouts read the agent's input types), and the
    # batch types a sampler fills and an algorithm reads
    # (``rlframe.samplers.collections``, a leaf that imports only utils): a
    # shared leaf, so that algorithms and samplers need not import each other.
    (("replays",), ("samplers.collections",)),
    # Algorithms (use agents and replays) and samplers (step agents in envs)
    # are peers: neither imports the other.
    (("algos",), ("samplers",)),
    # Runners drive samplers, agents and algorithms. Rebuilding an agent from
    # a run directory needs agents, envs and samplers, so it lives here
    # (``rlframe.runners.loading``); ``rlframe.utils.loading`` is the public
    # path kept for it, a thin re-export, and so belongs to this unit.
    (("runners", "utils.loading"),),
    # Ready-made configurations of runners, samplers, algorithms and agents.
    (("presets",),),
    # Hyperparameter search: trials are experiments the presets build.
    (("tune",),),
    # The command line, and ``python -m rlframe``.
    (("cli", "__main__"),),
)

# Public paths kept in a layer above their dotted name, as thin re-exports of
# the module that now holds the code: alias -> home. An alias may hold nothing
# but its docstring, imports from its home and ``__all__``.
ALIASES: dict[str, str] = {"rlframe.utils.loading": "rlframe.runners.loading"}

# Imports allowed although they break the rules above, each with its reason.
# (importer, imported) -> reason. Keep this empty: fix the code instead.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    """One import of an rlframe module by another."""
    importer: str
    imported: str
    line: int
    kind: str  # "module" (runs on import), "lazy" (in a function), "type" (TYPE_CHECKING)

    @property
    def lazy(self) -> bool:
        return self.kind != "module"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


@functools.lru_cache(maxsize=1)
def import_edges() -> tuple[Edge, ...]:
    """Every import of an rlframe module by another module of the package."""
    modules = _module_names()
    edges: list[Edge] = []

    def known(name: str) -> str | None:
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name if name in modules else None

    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def add(target: str, node: ast.stmt, kind: str, importer: str = name) -> None:
            resolved = known(target)
            if resolved is not None and resolved != importer:
                edges.append(Edge(importer, resolved, node.lineno, kind))

        def visit(node: ast.AST, kind: str) -> None:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.body:
                    visit(child, "type")
                for child in node.orelse:
                    visit(child, kind)
                return
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "rlframe":
                        add(alias.name, node, kind)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] == "rlframe":
                    for alias in node.names:
                        sub = f"{target}.{alias.name}"
                        add(sub if sub in modules else target, node, kind)
            inner = kind
            if kind == "module" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda)):
                inner = "lazy"
            for child in ast.iter_child_nodes(node):
                visit(child, inner)

        visit(ast.parse(path.read_text(), str(path)), "module")
    return tuple(edges)


def cycles(edges: tuple[Edge, ...] | list[Edge]) -> list[list[str]]:
    """One cycle (as a module path, first module repeated at the end) per
    strongly connected group of the graph of ``edges``."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = []
    for group in groups:
        start = min(group)
        # Shortest way back to start inside the group (breadth first).
        previous = {start: None}
        queue = [start]
        path = None
        while queue and path is None:
            node = queue.pop(0)
            for succ in sorted(graph.get(node, ())):
                if succ == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    path = path[::-1] + [start]
                    break
                if succ in group and succ not in previous:
                    previous[succ] = node
                    queue.append(succ)
        cycles.append(path)
    return sorted(cycles)


def layer_of(module: str) -> tuple[int, tuple[str, ...]] | None:
    """(layer index, unit) of an rlframe module, or None for the package root."""
    relative = module.partition(".")[2]
    best = None
    for level, units in enumerate(LAYERS):
        for unit in units:
            for prefix in unit:
                if relative == prefix or relative.startswith(prefix + "."):
                    if best is None or len(prefix) > len(best[2]):
                        best = (level, unit, prefix)
    return None if best is None else best[:2]


def layer_violations(edges: tuple[Edge, ...]) -> list[str]:
    """Imports of a higher layer, or of a peer unit in the same layer."""
    problems = []
    for edge in edges:
        if (edge.importer, edge.imported) in ALLOWED_UPWARD:
            continue
        source, target = layer_of(edge.importer), layer_of(edge.imported)
        if source is None or target is None or source[1] == target[1]:
            continue
        if target[0] > source[0] or target[0] == source[0]:
            kind = {"module": "import", "lazy": "lazy import",
                    "type": "type-only import"}[edge.kind]
            where = "a higher layer" if target[0] > source[0] else "a peer in its layer"
            problems.append(f"{edge.importer} (line {edge.line}) {kind}s {edge.imported}, "
                            f"{where} ({'/'.join(source[1])} -> {'/'.join(target[1])})")
    return sorted(set(problems))


def test_every_module_has_a_layer():
    unplaced = [name for name in _module_names() if name != "rlframe" and layer_of(name) is None]
    assert not unplaced, f"modules outside every layer of LAYERS: {unplaced}"


def test_the_graph_sees_imports_of_every_kind():
    edges = import_edges()
    pairs = {(edge.importer, edge.imported, edge.kind) for edge in edges}
    # absolute, relative (``from .atari_env import ...``), lazy and type-only imports
    assert ("rlframe.agents.base", "rlframe.utils.collections", "module") in pairs
    assert ("rlframe.envs.atari", "rlframe.envs.atari.atari_env", "module") in pairs
    assert ("rlframe.agents.base", "rlframe.envs.base", "type") in pairs
    assert {"module", "lazy", "type"} == {kind for _, _, kind in pairs}
    assert len(edges) > 300


def test_no_import_cycle_at_load_time():
    found = cycles([edge for edge in import_edges() if edge.kind == "module"])
    assert not found, "module-level import cycles:\n" + "\n".join(
        " -> ".join(cycle) for cycle in found)


def test_no_import_cycle_through_lazy_or_type_only_imports():
    found = cycles(import_edges())
    assert not found, "import cycles closed by a lazy or type-only import:\n" + "\n".join(
        " -> ".join(cycle) for cycle in found)


def test_imports_point_down_the_layers():
    problems = layer_violations(import_edges())
    assert not problems, "imports that run up (or sideways) the layers:\n" + "\n".join(problems)


def test_allowed_exceptions_are_still_needed():
    edges = {(edge.importer, edge.imported) for edge in import_edges()}
    stale = [pair for pair in ALLOWED_UPWARD if pair not in edges]
    assert not stale, f"ALLOWED_UPWARD lists imports that no longer exist: {stale}"


def test_aliases_only_re_export_their_home():
    modules = _module_names()
    for alias, home in ALIASES.items():
        tree = ast.parse(modules[alias].read_text())
        extra = []
        for index, node in enumerate(tree.body):
            if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # docstring
            if isinstance(node, ast.ImportFrom) and node.module in (home, "__future__"):
                continue
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"):
                continue
            extra.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
        assert not extra, (f"{alias} is kept in the layer of {home} as its re-export, but holds "
                           f"more than imports from it:\n" + "\n".join(extra))


MAX_MODULE_LINES = 500  # A module a reader can hold in their head; split by job beyond.


def test_no_module_is_over_500_lines():
    long = {path.relative_to(PACKAGE_DIR).as_posix(): n
            for path in sorted(PACKAGE_DIR.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"
