"""The CLI beside a real service (real Core, real demo model) with `LMSP_TOKEN` set to a
client's token, as a user who exported the token a pairing gave: a missing scope names the fix
in this shell for every command (`models load|unload` as `models rescan|verify|pull` do), and
`tasks` says it lists that client's tasks only. Also: an embedding's row shows the input
tokens it read, and `serve --version` answers as `--version` does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.serve_process import lmsp
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("cli-client-token"))
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("verb", ["load", "unload"])
def test_models_load_and_unload_name_lmsp_token_as_the_fix(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    monkeypatch.setenv("LMSP_TOKEN", live.token(*USER_SCOPES, name="laptop"))
    refused = lmsp("models", verb, MODEL, data_dir=live.data_dir)
    assert refused.returncode == 2, refused.stderr
    assert "This client (laptop) lacks the scope `admin`" in refused.stderr
    assert "LMSP_TOKEN is that client's token. Unset LMSP_TOKEN" in refused.stderr
    assert "lmsp-desktop token create --name NAME --scopes admin" in refused.stderr
    # Not the advice for a paired app: a headless server has no Clients page, and pairing
    # again is not how a shell gets an admin token.
    assert "Clients page" not in refused.stderr and "Pair again" not in refused.stderr


def test_tasks_with_a_token_lacking_read_names_lmsp_token_as_the_fix(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSP_TOKEN", live.token("models:read", name="reader"))
    refused = lmsp("tasks", data_dir=live.data_dir)
    assert refused.returncode == 2
    assert "This client (reader) lacks the scope `responses:read`" in refused.stderr
    assert "Unset LMSP_TOKEN" in refused.stderr and "Pair again" not in refused.stderr
