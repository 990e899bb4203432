"""No import cycles among the core's modules (lmsp_desktop/core): each layer imports only
the layers below it, so a module can be read, tested and moved on its own.

The graph is built from the source with `ast`: every module-level import, `from x import y`
included (an edge to `x.y` when `y` is a submodule, else to `x`), and imports inside
functions too, since they run when the function is called. Imports under
`if TYPE_CHECKING:` are left out: they never run, and they are how a type annotation may
name a class from a module above without a cycle at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lmsp_desktop.core

CORE = Path(lmsp_desktop.core.__file__).parent
PACKAGE = "lmsp_desktop.core"


def module_name(path: Path, root: Path = CORE, package: str = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run, leaving out `if TYPE_CHECKING:` bodies."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = CORE, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module → the modules of `package` it imports when it runs."""
    modules = {module_name(p, root, package): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # `import a.b.c` runs a, a.b and a.b.c: the edge goes to the deepest known.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, …, a], or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph[node]):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40 and "lmsp_desktop.core.storage.tasks" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in the core: " + " -> ".join(cycle or [])


def test_idempotency_imports_nothing_of_the_task_store() -> None:
    imported = import_graph()["lmsp_desktop.core.storage.idempotency"]
    assert not {m for m in imported if m.startswith("lmsp_desktop.core.storage.task")}


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    """The detector itself: a package whose modules import each other (one through a
    function-level import, one as `from pkg import sub`) is reported with the cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.c import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nimport pkg.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    graph = import_graph(pkg, "pkg")
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert graph["pkg.d"] == set()  # TYPE_CHECKING-only imports are left out
    (pkg / "c.py").write_text("x = 1\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None
