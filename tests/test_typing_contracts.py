"""The static side of rlframe's types stays in step with the run-time side.

* A namedarraytuple type named for type checkers (``X: TypeAlias =
  NamedArrayTuple`` under ``if TYPE_CHECKING:``) is built under that block's
  ``else:`` and is a namedarraytuple class at run time.
* Imports that name a higher layer's types sit under ``if TYPE_CHECKING:``;
  no module imports a higher layer when it runs.
"""
from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import rlframe
from rlframe.utils.collections import is_namedarraytuple_class

ROOT = pathlib.Path(rlframe.__file__).parent
# Higher layers may import lower ones, never the reverse (envs and spaces are one layer).
LAYER_RANK = {"cli": 9, "presets": 8, "runners": 7, "samplers": 6, "algos": 5, "replays": 4,
              "agents": 3, "models": 2, "distributions": 1, "envs": 0, "spaces": 0, "utils": -1}
MODULES = sorted(p for p in ROOT.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str | None:
    if module == "rlframe.utils.loading":  # Public path re-exporting rlframe.runners.loading.
        return "runners"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "rlframe" else None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
        and node.test.id == "TYPE_CHECKING"


def _assigned_names(nodes: list[ast.stmt]) -> set[str]:
    return {t.id for n in nodes if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name)}


def _static_nat_names(nodes: list[ast.stmt]) -> set[str]:
    return {n.target.id for n in nodes
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            and isinstance(n.value, ast.Name) and n.value.id == "NamedArrayTuple"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_static_namedarraytuple_names_are_built_at_run_time(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    blocks = [n for n in tree.body if _is_type_checking(n) and _static_nat_names(n.body)]
    if not blocks:
        return
    module = importlib.import_module(_module_name(path))
    for block in blocks:
        static = _static_nat_names(block.body)
        assert static == _assigned_names(block.orelse), (
            f"{path.name}: names for type checkers {sorted(static)} differ from the "
            f"classes built in the else branch {sorted(_assigned_names(block.orelse))}")
        for name in static:
            assert is_namedarraytuple_class(getattr(module, name)), f"{path.name}: {name}"


def _runtime_imports(nodes: list[ast.stmt]) -> list[str]:
    """Modules imported when the code runs (everywhere but under TYPE_CHECKING)."""
    found = []
    for node in nodes:
        if _is_type_checking(node):
            found += _runtime_imports(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        for field in ("body", "orelse", "finalbody", "handlers"):
            found += _runtime_imports(getattr(node, field, []))
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_runtime_import_of_a_higher_layer(path: pathlib.Path) -> None:
    own = _layer(_module_name(path))
    if own not in LAYER_RANK:
        return
    upward = [m for m in _runtime_imports(ast.parse(path.read_text()).body)
              if _layer(m) in LAYER_RANK and LAYER_RANK[_layer(m)] > LAYER_RANK[own]]
    assert not upward, (f"{path.relative_to(ROOT)} ({own}) imports {upward} at run time; "
                        "import a higher layer's types under `if TYPE_CHECKING:` only")
