"""Fill a temporary data directory with realistic activity and grab each view to PNG.

Runs the real core (store, recovery, registry with the demo model, runner with llama.cpp,
HTTP service) and the real window offscreen:

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshots.py [out_dir]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import qasync
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage import clients
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask

# (client, prompt, max_output_tokens): every generation is bounded, since the demo model can
# loop for thousands of tokens on some prompts.
PROMPTS = [
    ("notebook-ana", "Write a haiku about a lighthouse keeper.", 60),
    ("ci-pipeline", "Explain in two sentences why the sky is blue.", 80),
    ("notebook-ana", "Summarise the plot of Hamlet in one paragraph.", 200),
    ("ci-pipeline", "List three uses for a paperclip.", 80),
    ("notebook-ana", "Give me a limerick about a cat who codes.", 60),
]


# "Tides are the rise and fall of sea levels" in the demo model's tokens.
TIDES_TEXT = "Tides are the rise and fall of sea levels"
TIDES_TOKENS = [68, 1677, 359, 260, 4095, 284, 2332, 282, 3426, 1825]


async def leave_unfinished_tasks(data_dir: Path, model: str) -> None:
    """Tasks a crashed previous run left behind, so startup has something to recover."""
    store = Store(data_dir)
    await store.open()
    request = parse_create(
        {
            "model": model,
            "input": "Tell me about tides.",
            "background": True,
            "max_output_tokens": 40,
        },
        "fail",
    )
    for state, policy in (
        ("running", RestartPolicy.FAIL),
        ("running", RestartPolicy.RETRY),
        ("running", RestartPolicy.RESUME),
        ("queued", RestartPolicy.FAIL),
        ("cancelling", RestartPolicy.RESUME),
    ):
        made = await store.tasks.create(
            NewTask(model=model, request={**request, "on_restart": str(policy)}, on_restart=policy)
        )
        if state in ("running", "cancelling"):
            await store.tasks.mark_running(made.task_id)
            # As the runner leaves it: the text so far and, in the snapshot, its token ids,
            # which a resume continues after ("Resumed after 10 tokens" in the report).
            await store.tasks.append_deltas(
                made.task_id,
                [TIDES_TEXT],
                output_tokens=len(TIDES_TOKENS),
                input_tokens=6,
                snapshot={"tokens": TIDES_TOKENS, "seed": 7},
            )
        if state == "cancelling":
            await store.tasks.cancel(made.task_id)
    await store.close()


async def submit_over_http(core: Any, model: str) -> list[str]:
    """Background tasks from two paired clients, through the real HTTP API."""
    import aiohttp

    tokens = {}
    for name, scopes in (
        ("notebook-ana", {"models:read", "responses:read", "responses:write"}),
        ("ci-pipeline", {"responses:read", "responses:write"}),
    ):
        _, tokens[name] = await clients.create_client(core.store.db, name, frozenset(scopes))
    ids = []
    async with aiohttp.ClientSession(core.url) as http:
        for client, prompt, budget in PROMPTS:
            body = {
                "model": model,
                "input": prompt,
                "background": True,
                "max_output_tokens": budget,
                "on_restart": "resume" if budget > 100 else "fail",
            }
            headers = {"Authorization": f"Bearer {tokens[client]}"}
            async with http.post("/v1/responses", json=body, headers=headers) as answer:
                created = await answer.json()
                if answer.status != 202:
                    raise RuntimeError(f"creating a task failed: {created}")
            ids.append(created["id"])
    return ids


def pick_port() -> int:
    """The default port when it is free (the pictures then show what users see), else any."""
    import socket

    from lmsp_desktop.core.config import DEFAULT_PORT

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def settle(seconds: float) -> None:
    """Let the loop (and so Qt) run for a while: flushes, repaints, engine progress."""
    await asyncio.sleep(seconds)


def save(widget: QWidget, out: Path, name: str) -> None:
    widget.grab().save(str(out / f"{name}.png"))
    print("wrote", out / f"{name}.png")


async def main(out: Path) -> None:
    from PySide6.QtCore import QSettings

    from lmsp_desktop.app import Core
    from lmsp_desktop.core.config import DEFAULT_PORT
    from lmsp_desktop.core.models.demo import DEMO_MODEL_ID
    from lmsp_desktop.gui.main_window import MainWindow

    data_dir = Path(tempfile.mkdtemp(prefix="lmsp-shots-"))
    await leave_unfinished_tasks(data_dir, DEMO_MODEL_ID)
    port = pick_port()
    # The default port is no command-line flag (Settings would say "this run uses --port").
    core = Core(data_dir, port=None if port == DEFAULT_PORT else port)
    report = await core.open()
    await core.scan_models()
    await core.start_service()
    window = MainWindow(core, QSettings(str(data_dir / "gui.ini"), QSettings.Format.IniFormat))
    window.resize(1280, 800)
    window.show()
    await window.load()
    try:
        await shoot(core, window, report, out)
    finally:
        window.hide()
        window.stop_updates()
        await core.stop()
    await shoot_network_mode(data_dir, out)


async def shoot_network_mode(data_dir: Path, out: Path) -> None:
    """The same data folder served on every interface ("Let other devices on my network use
    it"): the window shows this machine's URL and, for other devices, the LAN address."""
    from PySide6.QtCore import QSettings

    from lmsp_desktop.app import Core
    from lmsp_desktop.gui.main_window import MainWindow

    core = Core(data_dir, host="0.0.0.0", port=0)
    await core.open()
    await core.scan_models()
    await core.start_service()
    window = MainWindow(core, QSettings(str(data_dir / "gui.ini"), QSettings.Format.IniFormat))
    window.resize(1280, 800)
    window.show()
    try:
        await window.load()
        await settle(0.6)
        save(window, out, "network")
        window.open_connect()
        await settle(0.4)
        save(window.dialog, out, "connect-network")
        window.dialog.close()
    finally:
        window.hide()
        window.stop_updates()
        await core.stop()


async def shoot_download(window: Any, out: Path) -> None:
    """Models › Download… against the tests' local hub (this machine reaches no real hub):
    a search, a repo picked, a file picked with its fits / tight / won't-fit estimate."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' fake hub
    from tests.support.fake_hub import FakeHub
    from tests.support.hub_repos import hub_repos

    hub = FakeHub(hub_repos())
    await hub.start()
    os.environ["HF_ENDPOINT"] = hub.url  # read at each call (core/downloads/hub.py)
    try:
        window.models.open_download()
        dialog = window.models.download_dialog
        dialog.resize(900, 520)
        dialog.query.setText("lmsp-test")
        await dialog.search()
        repo = dialog.repos.findItems("SmolLM2", Qt.MatchFlag.MatchContains)[0]
        dialog.repos.setCurrentItem(repo)

        def fit_cell() -> str:
            item = dialog.files.item(0, 3)  # "On this machine"
            return "" if item is None else str(item.text())

        deadline = time.monotonic() + 30
        while not fit_cell() and time.monotonic() < deadline:
            await settle(0.1)
        dialog.files.selectRow(0)  # picking a file reads its header from the hub: the estimate
        while "fits" not in fit_cell() and time.monotonic() < deadline:
            await settle(0.1)
        await settle(0.3)
        save(dialog, out, "download")
        dialog.close()
    finally:
        del os.environ["HF_ENDPOINT"]
        await hub.stop()


async def shoot(core: Any, window: Any, report: Any, out: Path) -> None:
    from lmsp_desktop.core.models.demo import DEMO_MODEL_ID

    dialog = window.show_recovery(report)
    await settle(0.5)
    save(dialog, out, "recovery")
    dialog.close()

    ids = await submit_over_http(core, DEMO_MODEL_ID)
    await core.store.tasks.cancel(ids[-1])  # still queued: cancelled at once
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        row = await core.store.tasks.get(ids[2])
        if row["state"] != "queued" and row["output_tokens"] > 8:
            break
        await settle(0.2)
    window.tasks.show_task(ids[0])
    await settle(0.6)
    window.tasks.details.tabs.setCurrentIndex(1)
    await settle(0.4)
    save(window, out, "tasks")
    window.tasks.details.tabs.setCurrentIndex(0)
    window.tasks.show_task(ids[2])
    await settle(0.6)
    save(window, out, "tasks-output")

    window.nav.setCurrentRow(1)
    window.models.table.selectRow(0)
    await settle(0.4)
    save(window, out, "models")
    await shoot_download(window, out)

    await core.pairing.start(
        "Ana's laptop",
        frozenset({"models:read", "responses:read", "responses:write"}),
        "192.168.1.23",
    )
    window.nav.setCurrentRow(2)
    await settle(0.6)
    save(window, out, "clients")

    window.open_pair()
    await settle(0.8)
    save(window.dialog, out, "pair")
    window.dialog.close()

    window.open_connect()
    await settle(0.4)
    save(window.dialog, out, "connect")
    window.dialog.close()

    window.open_settings()
    await settle(0.4)
    save(window.dialog, out, "settings")
    window.dialog.close()

    # Settings › Upstream servers with a server registered that does not answer (nothing
    # listens on port 9), as a user sees it after adding a machine that is switched off.
    await core.add_upstream("gpu-box", "http://127.0.0.1:9/v1", None, 2)
    window.open_settings()
    window.dialog.tabs.setCurrentWidget(window.dialog.upstreams)
    await settle(1.5)
    save(window.dialog, out, "settings-upstreams")
    window.dialog.close()
    await core.remove_upstream("gpu-box")
    for task_id in ids:
        row = await core.store.tasks.get(task_id)
        if row["state"] in ("queued", "loading", "running"):
            await core.store.tasks.cancel(task_id)
    await settle(1.0)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    target.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv)
    qasync.run(main(target))
