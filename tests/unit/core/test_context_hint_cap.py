"""The context_length_exceeded hint under Max context (the global cap): what it tells the
user to change is what gives the model more. A model's own context setting never goes past
the cap, so where the cap holds the model (or would clamp the setting asked for) the hint
says to raise the cap; where the model's own setting holds it too, the hint names both."""

from __future__ import annotations

from lmsp_desktop.core.context_window import context_exceeded
from lmsp_desktop.core.models.memory import FlagCap


class Model:
    id = "qwen2.5-7b-instruct"
    context_length = 131072


def hint(count: int, limit: int, cap: int, own: int = 0) -> str:
    error = context_exceeded(count, limit, False, "input", Model(), cap, own)
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
    message = hint(5000, 4096, FlagCap(4096))
    assert "this run's `--max-context 4096` caps every model at 4096" in message, message
    assert "again with `--max-context 8192` or more" in message, message
    assert "raise Max context" not in message, message
    assert "Max context in Settings does not apply while the flag is given" in message
    # Its own setting at the cap too: both named, the flag as the cap's origin.
    message = hint(5000, 4096, FlagCap(4096), own=4096)
    assert "its own context setting is 4096 and this run's `--max-context 4096`" in message
    assert "--context 8192" in message and "again with `--max-context 8192`" in message
