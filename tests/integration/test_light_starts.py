"""Commands that start fast: what a CLI command or `serve` imports before it has done its work.

numpy (with the `gguf` package's reader), llama.cpp, aiohttp's client and Qt each cost a
tenth of a second to half a second of CPU at import; a user pays them at every `token create`
in a shell and every `serve` restart (issue 25). Each probe runs in a fresh interpreter, does
the real thing on a real data directory, then lists which of those packages got imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.llama_bindings import PRIVATE as LOWLEVEL
from lmsp_desktop.core.models.demo import DEMO_MODEL_ID, demo_model_path
from tests.support.cut_model import cut_demo_model

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "gguf", "llama_cpp", "PySide6", "shiboken6", "aiohttp")

CLI = """
import json, sys
from lmsp_desktop.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # --version exits from argparse
    code = exit.code
packages = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"code": code, "packages": packages}), file=sys.stderr)
"""

# What `lmsp-desktop serve` does once it listens (cli.serve is Core.start + waiting).
SERVE = """
import asyncio, json, sys
from pathlib import Path
from lmsp_desktop.app import Core

async def run():
    core = Core(Path(sys.argv[1]), port=0)
    await core.start()
    packages = sorted({m.split(".")[0] for m in sys.modules})
    url = core.url
    await core.stop()
    return packages, url

packages, url = asyncio.run(run())
print(json.dumps({"packages": packages, "url": url}), file=sys.stderr)
"""


def probe(script: str, *argv: str) -> dict[str, Any]:
    """Run `script` in a fresh interpreter; its last stderr line, with `heavy`: which of
    HEAVY it imported."""
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    found["heavy"] = sorted(set(found["packages"]) & set(HEAVY))
    found["stdout"] = done.stdout
    return found


@pytest.mark.parametrize(
    "command",
    [
        ["--version"],
        ["token", "create", "--name", "laptop"],
        ["clients", "list"],
        ["pairing", "list"],
    ],
    ids=" ".join,
)
def test_light_commands_import_no_heavy_package(tmp_path: Path, command: list[str]) -> None:
    if command[0] != "--version" and command[:2] != ["token", "create"]:
        made = probe(CLI, "--data-dir", str(tmp_path), "token", "create", "--name", "x")
        assert made["code"] == 0
    found = probe(CLI, "--data-dir", str(tmp_path), *command)
    assert found["code"] == 0
    assert found["heavy"] == [], f"`lmsp-desktop {' '.join(command)}` imported {found['heavy']}"


def test_models_list_fits_without_numpy_gguf_or_llama_cpp(tmp_path: Path) -> None:
    # models list fits every local model: it reads their GGUF headers (the header reader
    # needs the gguf package's type tables, not its numpy-based tensor reader) and asks the
    # engine's context layout (core/engines/llama_layout.py, not llama.cpp).
    assert probe(SERVE, str(tmp_path))["url"]  # serve once: the demo model gets scanned
    found = probe(CLI, "--data-dir", str(tmp_path), "models", "list")
    assert found["code"] == 0
    heavy = set(found["heavy"])
    assert not {"numpy", "gguf", "llama_cpp", "PySide6", "shiboken6"} & heavy, heavy
    assert DEMO_MODEL_ID in found["stdout"]  # it did list (and fit) the demo model


def test_serve_listens_without_numpy_llama_cpp_or_qt(tmp_path: Path) -> None:
    found = probe(SERVE, str(tmp_path))
    assert str(found["url"]).startswith("http://127.0.0.1:")
    # aiohttp serves; the rest waits for the first load, embedding or window.
    assert found["heavy"] == ["aiohttp"], found["heavy"]
    # Given its data directory, and its cache directory in LMSP_CACHE_DIR (tests/conftest.py),
    # it never asks platformdirs where they are by default (~0.01 CPU-s of imports).
    assert os.environ.get("LMSP_CACHE_DIR")
    assert "platformdirs" not in found["packages"]


# serve answering /v1/models (a memory estimate per model): its engines run in worker
# processes, so serve itself never needs llama.cpp for this.
SERVE_MODELS = """
import asyncio, json, sys, urllib.request
from pathlib import Path
from lmsp_desktop.app import Core

async def run():
    core = Core(Path(sys.argv[1]), port=0)
    await core.start()
    try:
        request = urllib.request.Request(
            core.url + "/v1/models", headers={"Authorization": "Bearer " + sys.argv[2]}
        )
        read = lambda: json.loads(urllib.request.urlopen(request, timeout=60).read())
        body = await asyncio.to_thread(read)
        return sorted({m.split(".")[0] for m in sys.modules}), body
    finally:
        await core.stop()

packages, body = asyncio.run(run())
print(json.dumps({"packages": packages, "models": body["data"]}), file=sys.stderr)
"""


def test_serve_estimates_memory_without_importing_llama_cpp(tmp_path: Path) -> None:
    made = probe(CLI, "--data-dir", str(tmp_path), "token", "create", "--name", "probe")
    assert made["code"] == 0
    found = probe(SERVE_MODELS, str(tmp_path), made["stdout"].strip())
    demo = next(m for m in found["models"] if m["id"] == DEMO_MODEL_ID)
    assert demo["memory_estimate"] > 0  # the fit ran: the layout and the GPU question
    assert found["heavy"] == ["aiohttp"], found["heavy"]


# serve's first answer from a local model: the service counts the prompt's tokens (the
# model's own tokenizer, core/context_window.py) before its engine worker runs it.
SERVE_FIRST_ANSWER = """
import asyncio, json, sys, urllib.request
from pathlib import Path
from lmsp_desktop.app import Core

async def run():
    core = Core(Path(sys.argv[1]), port=0)
    await core.start()
    try:
        body = {"model": sys.argv[3], "input": "Say hi", "max_output_tokens": 2}
        request = urllib.request.Request(
            core.url + "/v1/responses",
            data=json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"},
        )
        read = lambda: json.loads(urllib.request.urlopen(request, timeout=120).read())
        answer = await asyncio.to_thread(read)
        return sorted({m.split(".")[0] for m in sys.modules}), sorted(sys.modules), answer
    finally:
        await core.stop()

packages, modules, answer = asyncio.run(run())
print(json.dumps({"packages": packages, "modules": modules, "answer": answer}), file=sys.stderr)
"""


def test_serve_counts_its_first_prompt_without_numpy_or_llama_cpps_high_level_api(
    tmp_path: Path,
) -> None:
    # The count needs llama.cpp's tokenizer (its C API); `import llama_cpp` would also
    # import numpy, jinja's chat formats and the high-level Llama class (~0.1 CPU-s of the
    # first request), which only the engine worker uses.
    made = probe(CLI, "--data-dir", str(tmp_path), "token", "create", "--name", "probe")
    assert made["code"] == 0
    found = probe(SERVE_FIRST_ANSWER, str(tmp_path), made["stdout"].strip(), DEMO_MODEL_ID)
    answer = found["answer"]
    assert answer["usage"]["input_tokens"] > 0 and answer["usage"]["output_tokens"] > 0
    assert LOWLEVEL in found["modules"]  # it did count, with llama.cpp's bindings
    assert "numpy" not in found["packages"]
    assert "llama_cpp" not in found["packages"]


# The counter first, then what a process running models imports (tests and benches do
# both, with PySide6's import hook inspecting each new module, as in a pytest-qt process):
# llama_cpp imports as a plain import makes it, and both go on working.
COUNT_THEN_ENGINE = """
import json, sys
import PySide6.QtCore
from pathlib import Path
from types import SimpleNamespace
from lmsp_desktop.core.context_window import TokenCounter
from lmsp_desktop.core.engines.llama_native import lowlevel

path = Path(sys.argv[1])
info = SimpleNamespace(path=path, mtime_ns=1, chat_template=None)
hi = {"messages": [{"role": "user", "content": "Hi"}]}
counter = TokenCounter()
first = counter.fit_sync(info, dict(hi), 100)
lowlevel()
import llama_cpp.llama_cpp
from llama_cpp import Llama
llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
counter.close()
again = TokenCounter().fit_sync(info, dict(hi), 100)
report = {"counts": [first, again], "lib": llama_cpp.llama_cpp._lib._name,
          "tokens": len(llama.tokenize(b"Hi")), "packages": []}
print(json.dumps(report), file=sys.stderr)
"""


def test_llama_cpp_imports_as_usual_after_the_counter() -> None:
    demo = demo_model_path()
    assert demo is not None
    found = probe(COUNT_THEN_ENGINE, str(demo))
    assert found["counts"][0] == found["counts"][1] > 1
    assert found["lib"].endswith(("libllama.so", "libllama.dylib", "llama.dll"))
    assert found["tokens"] >= 1


# An engine worker's run to its first token, as main.py runs it (`python -m
# lmsp_desktop.core.engines.worker FD`, here with the service's end of the socket played by a
# thread): load the model, generate one token, unload; then what it had imported.
WORKER = """
import asyncio, json, pickle, socket, sys, threading
from lmsp_desktop.core.engines.worker.main import run
from lmsp_desktop.core.engines.worker.protocol import HEADER, encode

ours, theirs = socket.socketpair()
told = []

def service():
    replies = ours.makefile("rb")
    def receive():
        (size,) = HEADER.unpack(replies.read(HEADER.size))
        return pickle.loads(replies.read(size))
    ours.sendall(encode(("load", sys.argv[1], {"n_threads": 1}, {"exact": True})))
    while (message := receive())[0] != "loaded":
        assert message[0] == "progress", message
    hi = {"messages": [{"role": "user", "content": "Hi"}], "max_output_tokens": 1}
    ours.sendall(encode(("generate", 1, hi)))
    while (message := receive())[0] != "done":
        if message[0] == "tokens":
            told.extend(message[2])
    told.extend(message[4])  # the last tokens ride with the end
    ours.sendall(encode(("unload",)))

threading.Thread(target=service, daemon=True).start()
asyncio.run(run(theirs.fileno()))
packages = sorted({m.split(".")[0] for m in sys.modules})
ours_ = sorted(m for m in sys.modules if m.startswith("lmsp_desktop."))
print(json.dumps({"packages": packages, "modules": ours_, "told": told}), file=sys.stderr)
"""


def test_engine_worker_imports_nothing_of_the_service() -> None:
    # A worker starts for every load and after every crash (B17: SIGKILL → the first resumed
    # token): it pays for the engine (numpy, llama.cpp) and nothing of the service's side,
    # the store, the HTTP service or the window (main.py's promise).
    found = probe(WORKER, str(cut_demo_model()))
    assert len(found["told"]) == 1  # it did load the model and generate its one token
    assert {"numpy", "llama_cpp"} <= set(found["heavy"]), found["heavy"]
    assert not {"aiohttp", "PySide6", "shiboken6", "gguf"} & set(found["heavy"]), found["heavy"]
    service_side = (
        "lmsp_desktop.core.engines.worker.client",
        "lmsp_desktop.core.engines.worker.verdicts",
        "lmsp_desktop.core.storage",
        "lmsp_desktop.core.service",
        "lmsp_desktop.core.api",
        "lmsp_desktop.core.models",
        "lmsp_desktop.gui",
    )
    imported = [m for m in found["modules"] if m.startswith(service_side)]
    assert imported == [], imported


# serve's model scan on a machine with no Hugging Face cache (tests/conftest.py points
# HF_HUB_CACHE at a folder that does not exist): the scan a start begins, then a full rescan.
SERVE_SCANNED = """
import asyncio, json, sys
from pathlib import Path
from lmsp_desktop.app import Core

async def run():
    core = Core(Path(sys.argv[1]), port=0)
    await core.start()
    try:
        await core.rescan_models()
        models = [m.id for m in await core.models()]
        return sorted({m.split(".")[0] for m in sys.modules}), models
    finally:
        await core.stop()

packages, models = asyncio.run(run())
print(json.dumps({"packages": packages, "models": models}), file=sys.stderr)
"""


def test_scan_without_a_hugging_face_cache_skips_its_scanner(tmp_path: Path) -> None:
    # huggingface_hub's cache scanner answers "no cache" after ~0.02 CPU-s of imports, in
    # every scan of every start; the scan asks the folder itself.
    assert not Path(os.environ["HF_HUB_CACHE"]).exists()
    found = probe(SERVE_SCANNED, str(tmp_path))
    assert DEMO_MODEL_ID in found["models"]  # the scan ran and listed what there is
    assert "huggingface_hub" not in found["packages"]
