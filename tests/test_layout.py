"""The package's shape: layers computed from the imports (ast), never a line count.

The layers, top to bottom: the adapters (``cli``, ``mcp``); the front door ``index``; ``indexing``
and ``search``; ``store``, ``model``, ``text`` and ``files``; ``config``, ``process`` and
``errors``. Imports point down, there is no circle (imports inside functions count), and an
import placed inside a function says why on its line or the line above.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import semsearch

PACKAGE = Path(semsearch.__file__).parent
ADAPTERS = ("cli", "mcp")
BELOW_STORE = ("model", "text", "files")
ABOVE_STORE = ("search", "indexing", "index", *ADAPTERS)
# What the adapters must leave to the library: SQL, LanceDB, the model, threads of their own.
ADAPTER_FORBIDDEN = ("sqlite3", "lancedb", "pyarrow", "onnxruntime", "threading", "semsearch.model")


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is and whether it runs inside a function."""

    module: str  # the importing module
    target: str  # the imported module (or module.name for `from m import name`)
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    """``semsearch.store.sqlite.store`` for ``semsearch/store/sqlite/store.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in ``path`` but those under ``if TYPE_CHECKING:`` (they never run)."""
    module = module_name(path)

    def visit(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(module, alias.name, child.lineno, inside)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(module, path, child)
                for alias in child.names:
                    yield Import(module, f"{base}.{alias.name}", child.lineno, inside)
            yield from visit(child, inside)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), False)


def _facade_homes() -> set[str]:
    """The modules the root package loads its public names from (PEP 562 ``__getattr__``)."""
    return set(semsearch._HOMES.values())


def graph() -> dict[str, set[str]]:
    """module -> package modules it imports (``from m import name`` counts as importing m)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for found in imports_of(path):
            target = found.target
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add(target)
    edges["semsearch"] |= _facade_homes()
    return edges


def layer(module: str) -> str:
    """The top-level part of a package module: ``store`` for ``semsearch.store.sqlite.rows``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports, as the modules along it (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep, [*stack, dep])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Each import that points up a layer, as ``importer -> imported``."""
    bad = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            low, high = layer(module), layer(target)
            if low == "store" and high in ABOVE_STORE:
                bad.append(f"{module} -> {target} (the store serves search and indexing)")
            elif low in BELOW_STORE and high in ("store", *ABOVE_STORE):
                bad.append(f"{module} -> {target} ({low} sits below the store)")
            elif low in ("config", "errors", "process") and target != "semsearch.errors":
                bad.append(f"{module} -> {target} ({low} is the bottom: errors only)")
            elif low in ("indexing", "search", "index") and high in ADAPTERS:
                bad.append(f"{module} -> {target} (the library never imports an adapter)")
            elif {low, high} == {"indexing", "search"}:
                bad.append(f"{module} -> {target} (indexing and search stand side by side)")
    return bad


def test_the_graph_sees_the_package() -> None:
    edges = graph()
    assert "semsearch.store.sqlite.store" in edges
    assert "semsearch.search.ranking" in edges["semsearch.search.fusion"]
    assert "semsearch.index" in edges["semsearch"]  # the facade's lazy names count


def test_no_import_circle() -> None:
    assert find_cycle(graph()) is None


def test_imports_point_down() -> None:
    assert violations(graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"semsearch.store.base": {"semsearch.search.hits"}}, "the store serves"),
        ({"semsearch.text.chunking": {"semsearch.store"}}, "below the store"),
        ({"semsearch.files.grep": {"semsearch.index"}}, "below the store"),
        ({"semsearch.config": {"semsearch.text.chunking"}}, "the bottom"),
        ({"semsearch.index": {"semsearch.cli.commands"}}, "never imports an adapter"),
        ({"semsearch.indexing.pipeline": {"semsearch.search.ranking"}}, "side by side"),
    ],
)
def test_each_rule_catches_an_upward_import(edges: dict[str, set[str]], expected: str) -> None:
    (found,) = violations(edges)
    assert expected in found


def test_the_cycle_finder_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _package_imports() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in imports_of(path)]


def test_adapters_leave_sql_lancedb_models_and_threads_to_the_library() -> None:
    found = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in _package_imports()
        if layer(i.module) in ADAPTERS
        and any(i.target == f or i.target.startswith(f + ".") for f in ADAPTER_FORBIDDEN)
    ]
    assert found == []


def test_only_the_store_talks_to_sqlite_and_lancedb() -> None:
    found = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in _package_imports()
        if i.target.split(".")[0] in ("sqlite3", "lancedb", "pyarrow")
        and layer(i.module) != "store"
    ]
    assert found == []


def test_every_import_inside_a_function_says_why() -> None:
    """Only heavy or optional libraries load late (onnxruntime, lancedb, pypdf, the MCP SDK, the
    library behind a CLI command), each with a comment on its line or the line above."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for found in imports_of(path):
            if not found.in_function:
                continue
            here, above = lines[found.line - 1], lines[found.line - 2].strip()
            if "#" not in here and not above.startswith("#"):
                unexplained.append(f"{found.module}:{found.line} {found.target}")
    assert sorted(set(unexplained)) == []


def test_every_subpackage_is_packaged() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(project["tool"]["setuptools"]["packages"])
    found = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert "semsearch.store.sqlite" in found
    assert found <= listed, f"pyproject's packages miss {sorted(found - listed)}"
