"""What `--log-level` turns on: our loggers; a library that logs each HTTP request at INFO
(huggingface_hub's httpx client: every hub call's URL) stays quiet unless named."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from lmsp_desktop.logs import CHATTY, LIBRARIES_ENV, OURS, setup_logging

NAMES = (OURS, *CHATTY, "")


@pytest.fixture
def levels_as_found() -> Iterator[None]:
    found = {name: logging.getLogger(name).level for name in NAMES}
    yield
    for name, level in found.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("levels_as_found")
def test_hub_client_requests_are_not_logged_at_the_default_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LIBRARIES_ENV, raising=False)
    setup_logging(None, "INFO", console=False)
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx2").isEnabledFor(logging.WARNING)
    assert logging.getLogger(f"{OURS}.core").isEnabledFor(logging.INFO)
    setup_logging(None, "DEBUG", console=False)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert logging.getLogger(f"{OURS}.core").isEnabledFor(logging.DEBUG)


@pytest.mark.usefixtures("levels_as_found")
def test_a_library_named_in_the_variable_logs_at_the_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LIBRARIES_ENV, "httpx2")
    setup_logging(None, "DEBUG", console=False)
    assert logging.getLogger("httpx2").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
