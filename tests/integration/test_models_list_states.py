"""`lmsp-desktop models list` says what the window's Models page says: `loaded` for a model the
running service has loaded (it said `verified`, the file's state, while the page's Loaded
column said loaded), and for a file that cannot run its reason (a cut GGUF was listed
`invalid` with no reason, while the page's Status tooltip gives it). A real served Core
(real SQLite, the demo model and a cut copy of it in a model folder, real HTTP) and the real
CLI beside it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.serve_process import call
from tests.integration.service_fixtures import LiveCore, cli_beside
from tests.support.model_stores import demo

DEMO = "smollm2-135m-instruct"
CUT_SIZE = 49_181_216  # the reviewer's `truncate -s 49181216`: half the demo's tensors


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    folder = tmp_path_factory.mktemp("list-models")
    with demo().open("rb") as whole, (folder / "cut.gguf").open("wb") as cut:
        cut.write(whole.read(CUT_SIZE))  # an unfinished download or a cut copy
    running = LiveCore(tmp_path_factory.mktemp("list-core"), model_dirs=[folder])
    try:
        yield running
    finally:
        running.stop()


def rows_of(text: str) -> dict[str, list[str]]:
    """The table's rows by name: NAME SOURCE STATE CONTEXT … (cells apart by whitespace)."""
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["NAME", "SOURCE", "STATE"], text
    return {line.split()[0]: line.split() for line in lines[1:] if not line.startswith(" ")}


def test_models_list_says_loaded_and_why_a_file_cannot_run(served: LiveCore) -> None:
    admin = served.token("admin")
    status, loaded = call(f"{served.url}/v1/models/{DEMO}/load", admin, "POST")
    assert status == 200 and loaded["state"] == "loaded", loaded
    status, cut = call(f"{served.url}/v1/models/cut", admin)
    assert status == 200 and cut["state"] == "invalid", cut
    # The reason the window shows (its Status tooltip: "Not run: …"), from the core.
    reason = served.call(served.core.registry.get("cut")).invalid_reason
    assert reason and "shorter than its tensors need" in reason
    assert cut["reason"] == reason

    listed = cli_beside(served, "models", "list")
    assert listed.returncode == 0, listed.stderr
    rows = rows_of(listed.stdout)
    assert rows[DEMO][2] == "loaded", listed.stdout  # was "verified"
    assert rows["cut"][2] == "invalid", listed.stdout
    # Its reason under the table, wrapped to 80 columns (the table stays one line a model).
    tail = listed.stdout.split("\ncut: ", 1)[1]
    assert " ".join(tail.split()) == f"invalid: {reason}", listed.stdout
    assert all(len(line) <= 80 for line in tail.splitlines()), listed.stdout

    as_json = cli_beside(served, "models", "list", "--json")
    assert as_json.returncode == 0, as_json.stderr
    by_id = {row["id"]: row for row in json.loads(as_json.stdout)}
    assert by_id[DEMO]["state"] == "loaded"
    assert (by_id["cut"]["state"], by_id["cut"]["reason"]) == ("invalid", reason)

    status, unloaded = call(f"{served.url}/v1/models/{DEMO}/unload", admin, "POST")
    assert status == 200, unloaded
    listed = cli_beside(served, "models", "list")
    assert rows_of(listed.stdout)[DEMO][2] == "verified", listed.stdout  # loaded no more
