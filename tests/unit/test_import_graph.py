"""The window reaches the core only through its seam, and the core never needs the window.

Read from the source (no imports run): every `import` and `from … import` in the package,
relative ones resolved, inside functions and TYPE_CHECKING blocks too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lmsp_desktop

PACKAGE = Path(lmsp_desktop.__file__).parent
# The one place outside gui/ allowed to start the window: the command line's default command.
LAUNCHERS = {"lmsp_desktop.cli"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module the source of `module` imports, as dotted names (`from a import b` gives
    a and a.b)."""
    tree = ast.parse(source)
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules() -> dict[str, set[str]]:
    return {
        module_name(p): imports_of(
            p.read_text(), module_name(p), is_package=p.name == "__init__.py"
        )
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_no_window_module_imports_the_store() -> None:
    offenders = {
        name: sorted(i for i in found if within(i, "lmsp_desktop.core.storage"))
        for name, found in modules().items()
        if within(name, "lmsp_desktop.gui")
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_nothing_outside_the_window_imports_it_but_the_launcher() -> None:
    offenders = {
        name: sorted(i for i in found if within(i, "lmsp_desktop.gui"))
        for name, found in modules().items()
        if not within(name, "lmsp_desktop.gui") and name not in LAUNCHERS
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_check_sees_imports_in_every_form() -> None:
    """The reader finds plain, from, relative, function-level and TYPE_CHECKING imports (else
    the two tests above could pass on a package that breaks the rule)."""
    source = """
import lmsp_desktop.core.storage.db
from ..core.storage import recovery
def late():
    from lmsp_desktop.gui import data
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from lmsp_desktop.core.storage.tasks import TaskStore
"""
    found = imports_of(source, "lmsp_desktop.gui.probe")
    assert "lmsp_desktop.core.storage.db" in found
    assert "lmsp_desktop.core.storage.recovery" in found
    assert "lmsp_desktop.gui.data" in found
    assert "lmsp_desktop.core.storage.tasks.TaskStore" in found
