"""The context_length_exceeded hint under Max context (the global cap): what it tells the
user to change is what gives the model more. A model's own context setting never goes past
the cap, so where the cap holds the model (or would clamp the setting asked for) the hint
says to raise the cap; where the model's own setting holds it too, the hint names both."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from lmsp_desktop.core.context_window import TokenCounter, admit, context_exceeded
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models import machine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.fitting import ModelFitter
from lmsp_desktop.core.models.memory import GIB, CapOrigin, ModelSettings, one_context


class Model:
    id = "qwen2.5-7b-instruct"
    context_length = 131072


def hint(
    count: int, limit: int, cap: int, own: int = 0, origin: CapOrigin = CapOrigin.SETTINGS
) -> str:
    error = context_exceeded(count, limit, False, "input", Model(), cap, own, cap_origin=origin)
    assert error.code == "context_length_exceeded" and error.status == 400
    return error.message


def test_where_the_cap_holds_the_model_the_hint_raises_the_cap() -> None:
    message = hint(3000, 2048, 2048)
    assert "Max context caps every model at 2048" in message
    assert "raise Max context to 4096" in message and "--max-context 4096" in message
    assert "models set" not in message  # clamped to 2048: it would not help


def test_without_a_cap_the_hint_is_the_models_own_setting() -> None:
    message = hint(3000, 2048, 0)
    assert "`lmsp-desktop models set qwen2.5-7b-instruct --context 4096`" in message
    assert "Max context" not in message


def test_below_the_cap_the_models_setting_suffices_when_the_cap_allows_it() -> None:
    # Held to 2048 by its own setting (or the memory) under a cap of 16k.
    message = hint(3000, 2048, 16384)
    assert "--context 4096" in message and "Max context" not in message


def test_a_setting_the_cap_would_clamp_needs_both() -> None:
    # Held to 2048 by its own setting, 5000 tokens need 8192, the cap is 4096.
    message = hint(5000, 2048, 4096)
    assert "--context 8192" in message
    assert "raise Max context to 8192" in message


def test_where_the_cap_and_the_models_setting_both_hold_the_hint_names_both() -> None:
    # `models set --context 2048` under a cap of 2048: raising the cap alone leaves the
    # model at its own 2048, setting it alone is clamped by the cap.
    message = hint(3000, 2048, 2048, own=2048)
    assert "its own context setting is 2048 and Max context caps every model at 2048" in message
    assert "`lmsp-desktop models set qwen2.5-7b-instruct --context 4096`" in message
    assert "raise Max context to 4096" in message and "--max-context 4096" in message


def test_a_setting_the_raised_cap_would_still_clamp_is_named_too() -> None:
    # Set to 3000 (clamped to the 2048 cap): raising the cap to 4096 leaves it at 3000.
    message = hint(3500, 2048, 2048, own=3000)
    assert "--context 4096" in message and "raise Max context to 4096" in message
    # Set to 8192: the cap alone holds it.
    message = hint(3500, 2048, 2048, own=8192)
    assert "models set" not in message and "raise Max context to 4096" in message


def test_a_cap_the_command_lines_flag_set_is_raised_with_the_flag() -> None:
    """A window or service started with `--max-context 4096`: raising Max context in
    Settings cannot help while the flag is given (the flag wins for the run), so the hint
    names the flag as what holds the model and says to start again with a larger one."""
    message = hint(5000, 4096, 4096, origin=CapOrigin.FLAG)
    assert "this run's `--max-context 4096` caps every model at 4096" in message, message
    assert "again with `--max-context 8192` or more" in message, message
    assert "raise Max context" not in message, message
    assert "Max context in Settings does not apply while the flag is given" in message
    # Its own setting at the cap too: both named, the flag as the cap's origin.
    message = hint(5000, 4096, 4096, own=4096, origin=CapOrigin.FLAG)
    assert "its own context setting is 4096 and this run's `--max-context 4096`" in message
    assert "--context 8192" in message and "again with `--max-context 8192`" in message


class CharVocab:
    """A character a token: the refusal's words without loading a tokenizer."""

    def count(self, messages: list[dict[str, Any]], tools: Any = None) -> int:
        return sum(len(m["content"]) for m in messages)


class DemoFile:
    """The demo model's file as the registry lists it (trained for 8,192 tokens)."""

    id = "smollm2-135m-instruct"
    source = "folder"
    chat_template = None
    context_length = 8192
    mtime_ns = 1

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size_bytes = path.stat().st_size


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        (CapOrigin.FLAG, "this run's `--max-context 2048` caps every model at 2048"),
        (CapOrigin.SETTINGS, "Max context caps every model at 2048"),
    ],
)
async def test_admission_names_where_the_cap_came_from_as_the_plan_says(
    origin: CapOrigin, said: str
) -> None:
    """Task creation hands admission the cap as the plain number the run's settings hold
    (core/api/creation.py) and the plan the fitter made: where the cap came from travels
    on the plan, so a run started with `--max-context 2048` is told to start again with a
    larger flag, and one whose 2048 is Settings' to raise Max context there."""
    path = demo_model_path()
    assert path is not None
    fitter = ModelFitter(
        cast(Any, None),  # planning reads the file's header and the memory, not the store
        one_context,
        default_parallel=lambda: 1,
        context_cap=lambda: 2048,
        cap_origin=origin,
        memory=lambda: machine.HostMemory(64 * GIB, 60 * GIB, "test"),
        gpus=lambda: [],
    )
    info = DemoFile(path)
    decided = fitter.plan_sync(cast(Any, info), ModelSettings())
    assert decided.context_length == 2048
    counter = TokenCounter()
    counter._vocabs[(str(path), 1)] = CharVocab()  # type: ignore[assignment]
    request = {"api": "responses", "messages": [{"role": "user", "content": "x" * 3000}]}
    with pytest.raises(LmspError) as caught:
        await admit(counter, info, request, 2048, decided)
    message = caught.value.message
    assert caught.value.code == "context_length_exceeded", message
    assert "maximum context length is 2048 tokens" in message, message
    assert said in message, message
    flagged = origin is CapOrigin.FLAG
    assert ("again with `--max-context 4096` or more" in message) == flagged, message
    assert ("raise Max context to 4096" in message) != flagged, message
