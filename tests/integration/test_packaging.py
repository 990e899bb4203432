"""Desktop integration files pass Debian's validators; the PyInstaller spec ships llama.cpp's
libraries and every module imported by name; icons exist at every size; the per-user
install puts a valid menu entry and themed icons in place.

The full bundle build (minutes) is not run here: `make package` builds it and smoke-tests
`serve --help`, a headless start, one generation and a clean SIGTERM.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop import __version__

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
DESKTOP = PACKAGING / "lmsp-desktop.desktop"
METAINFO = PACKAGING / "io.github.lmsp_desktop.LmspDesktop.metainfo.xml"
SPEC = PACKAGING / "lmsp-desktop.spec"
PNG_DIR = ROOT / "resources" / "icons" / "png"
APP_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
STATES = (
    "queued",
    "loading",
    "running",
    "cancelling",
    "completed",
    "incomplete",
    "failed",
    "cancelled",
)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (no Qt needed)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR", f"{path} has no IHDR chunk first"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def validator(name: str, apt_package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install {apt_package})")
    return path


def desktop_entry(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if "=" in line)


# -- validators ------------------------------------------------------------------------------
def test_desktop_entry_passes_desktop_file_validate() -> None:
    tool = validator("desktop-file-validate", "desktop-file-utils")
    result = subprocess.run([tool, str(DESKTOP)], capture_output=True, text=True)
    # Not even hints: a clean entry shows up once, in the right menu.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_metainfo_passes_appstreamcli_validate() -> None:
    tool = validator("appstreamcli", "appstream")
    result = subprocess.run(
        [tool, "validate", "--no-net", str(METAINFO)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"^[EW]: ", result.stdout, re.MULTILINE), result.stdout


def test_metainfo_matches_desktop_entry_icon_and_version() -> None:
    entry = desktop_entry(DESKTOP)
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("launchable[@type='desktop-id']") == DESKTOP.name
    assert root.findtext("icon[@type='stock']") == entry["Icon"] == "lmsp-desktop"
    assert root.findtext("provides/binary") == entry["Exec"] == "lmsp-desktop"
    # Software centres show the newest release: it must be the version we ship.
    release = root.find("releases/release")
    assert release is not None and release.get("version") == __version__
    shots = [img.text or "" for img in root.iterfind("screenshots/screenshot/image")]
    assert [s.rsplit("/", 1)[-1] for s in shots] == ["tasks.png", "models.png", "clients.png"]
    assert all(s.startswith("https://") and "/docs/screenshots/" in s for s in shots)


# -- PyInstaller spec -------------------------------------------------------------------------
def spec_values(*names: str) -> dict[str, Any]:
    """Evaluate the spec's top-level assignments of `names`, without running PyInstaller."""
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    wanted = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
    ]
    namespace: dict[str, Any] = {"Path": Path, "PACKAGE": ROOT / "lmsp_desktop"}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(SPEC), "exec"), namespace)
    return {name: namespace[name] for name in names}


def test_spec_bundles_the_llama_shared_libraries() -> None:
    libraries = spec_values("LLAMA_LIBRARIES")["LLAMA_LIBRARIES"]
    assert "libllama.so" in libraries
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None, "llama-cpp-python is not installed"
    lib_dir = Path(spec.origin).parent / "lib"
    for name in libraries:
        assert (lib_dir / name).is_file(), f"{name} is not in {lib_dir}"
    # libllama.so needs the ggml libraries by soname (through RUNPATH=$ORIGIN), directly
    # and through each other; every one must be bundled next to it.
    needed: set[str] = set()
    todo = ["libllama.so"]
    while todo:
        data = (lib_dir / todo.pop()).read_bytes()
        for soname in set(re.findall(rb"libggml[\w-]*\.so\.\d+", data)) - {b""}:
            if soname.decode() not in needed:
                needed.add(soname.decode())
                todo.append(soname.decode())
    assert {"libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0"} <= needed
    assert needed <= set(libraries), f"not bundled: {needed - set(libraries)}"
    assert '"llama_cpp/lib"' in SPEC.read_text(encoding="utf-8")


def test_spec_lists_every_module_imported_by_name() -> None:
    hidden = spec_values("HIDDEN_IMPORTS")["HIDDEN_IMPORTS"]
    for module in ("qasync", "aiosqlite", "segno", "llama_cpp"):
        assert module in hidden
    routes = sorted((ROOT / "lmsp_desktop/core/service").glob("routes_*.py"))
    assert routes
    for route in routes:
        assert f"lmsp_desktop.core.service.{route.stem}" in hidden
    # A module imported through importlib is invisible to PyInstaller's scan: the bundle
    # would fail only when that code path runs.
    by_name = set()
    for source in (ROOT / "lmsp_desktop").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        by_name |= set(re.findall(r"import_module\(\s*[\"']([\w.]+)[\"']", text))
    assert by_name, "expected the llama engine's importlib imports"
    assert by_name <= set(hidden), f"not in the spec's HIDDEN_IMPORTS: {by_name - set(hidden)}"
    for module in hidden:
        assert importlib.util.find_spec(module) is not None, f"{module} does not exist"


# -- icons ------------------------------------------------------------------------------------
def test_icon_pngs_exist_at_every_size() -> None:
    for size in APP_SIZES:
        assert png_size(PNG_DIR / f"lmsp-desktop-{size}.png") == (size, size)
    for state in STATES:
        for size in (16, 24, 32, 48):
            assert png_size(PNG_DIR / f"state-{state}-{size}.png") == (size, size)
    for tray in ("tray", "tray-busy", "tray-paused"):
        for size in (16, 22, 24, 32, 48, 64):
            assert png_size(PNG_DIR / f"{tray}-{size}.png") == (size, size)


# -- per-user install -------------------------------------------------------------------------
def test_install_script_puts_a_valid_menu_entry_and_icons_in_place(tmp_path: Path) -> None:
    bundle = tmp_path / "my bundle"  # a space, as in real home folders
    bundle.mkdir()
    exe = bundle / "lmsp-desktop"
    exe.write_text("#!/bin/sh\necho bundle\n")
    exe.chmod(0o755)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("XDG_DATA_HOME", None)
    script = PACKAGING / "install-desktop.sh"
    subprocess.run(["bash", str(script), str(bundle)], env=env, check=True, capture_output=True)

    share = tmp_path / "home/.local/share"
    installed = share / "applications/lmsp-desktop.desktop"
    entry = desktop_entry(installed)
    assert entry["Exec"] == f'"{exe}"' and entry["TryExec"] == str(exe)
    assert entry["Icon"] == "lmsp-desktop"
    for size in APP_SIZES:
        icon = share / f"icons/hicolor/{size}x{size}/apps/lmsp-desktop.png"
        assert png_size(icon) == (size, size)
    assert (share / "icons/hicolor/scalable/apps/lmsp-desktop.svg").is_file()
    assert (share / "metainfo" / METAINFO.name).read_bytes() == METAINFO.read_bytes()
    command = tmp_path / "home/.local/bin/lmsp-desktop"
    assert subprocess.run([str(command)], capture_output=True, text=True).stdout == "bundle\n"
    if shutil.which("desktop-file-validate"):
        assert subprocess.run(["desktop-file-validate", str(installed)]).returncode == 0

    subprocess.run(["bash", str(script), "--uninstall"], env=env, check=True, capture_output=True)
    assert not installed.exists() and not command.exists()
    assert not list(share.glob("icons/hicolor/*/apps/lmsp-desktop.*"))
    assert exe.exists()
