"""The context_length_exceeded hint under Max context (the global cap): what it tells the
user to change is what gives the model more. A model's own context setting never goes past
the cap, so where the cap holds the model (or would clamp the setting asked for) the hint
says to raise the cap."""

from __future__ import annotations

from lmsp_desktop.core.context_window import context_exceeded


class Model:
    id = "qwen2.5-7b-instruct"
    context_length = 131072


def hint(count: int, limit: int, cap: int) -> str:
    error = context_exceeded(count, limit, False, "input", Model(), cap)
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
