"""`lmsp_desktop.core` runs headless: importing all of it must not import PySide6."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import importlib, json, pkgutil, sys
import lmsp_desktop.core as core
names = [core.__name__]
for info in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
    importlib.import_module(info.name)
    names.append(info.name)
qt = sorted(m for m in sys.modules if m.split(".")[0] in ("PySide6", "shiboken6"))
print(json.dumps({"modules": names, "qt": qt}))
"""


def test_importing_all_of_core_does_not_import_qt() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # The walk really reached the submodules, or the check below would prove nothing.
    assert "lmsp_desktop.core.storage.tasks" in found["modules"]
    assert "lmsp_desktop.core.states" in found["modules"]
    assert found["qt"] == [], f"core imported Qt: {found['qt']}"
