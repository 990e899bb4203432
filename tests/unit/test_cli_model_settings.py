"""`models set` flags: what each spelling means, and the mistakes it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_desktop.cli import build_parser
from lmsp_desktop.cli_model_settings import changed
from lmsp_desktop.core.engines.base import LoadSettings
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.memory import (
    AUTO_CONTEXT_RULE,
    GIB,
    Budget,
    ModelSettings,
    ModelShape,
    auto_context_top,
    estimate,
    one_context,
    plan,
)


def parse(*flags: str) -> object:
    return build_parser().parse_args(["models", "set", "m", *flags])


def test_flags_not_given_keep_their_value() -> None:
    current = ModelSettings(4096, 2, "q8_0", 7)
    assert changed(current, parse()) == current
    assert changed(current, parse("--context", "8192")) == ModelSettings(8192, 2, "q8_0", 7)


def test_auto_default_and_all_spell_the_services_choice() -> None:
    current = ModelSettings(4096, 2, "q8_0", 7)
    args = parse("--context", "auto", "--parallel", "default", "--gpu-layers", "auto")
    assert changed(current, args) == ModelSettings(None, None, "q8_0", None)
    assert changed(current, parse("--gpu-layers", "all")).gpu_layers == -1
    assert changed(current, parse("--kv-type", "f16")).kv_type == "f16"


def test_a_word_where_a_number_belongs_names_the_flag() -> None:
    with pytest.raises(LmspError, match="--context takes a number or auto"):
        changed(ModelSettings(), parse("--context", "lots"))
    with pytest.raises(SystemExit):  # argparse refuses a KV type it does not know
        parse("--kv-type", "q4_0")


def test_the_help_says_auto_is_the_default_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """`--context auto` is the default rule (docs/memory.md: the trained context, at most
    8192 or the Max context, less when memory is short), not "the largest that fits": the
    help said so, and a user expected auto to give a 128k model its whole context."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["models", "set", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "largest that fits" not in shown
    assert "auto (the default): the model's trained context, at most 8,192 tokens" in shown
    assert AUTO_CONTEXT_RULE in shown


def test_the_docs_say_what_auto_does_as_the_help_and_the_window_do() -> None:
    """docs/memory.md, `models set --help` and the Models page's tooltip say one sentence
    (the window once said "auto (fit the memory)"), and it is the fitter's rule: a model
    trained on 32,768 tokens gets 8,192 with memory to spare, its whole context under a Max
    context of 32,768, and 2,048 (never less) when the budget holds no more."""
    docs = Path(__file__).parents[2] / "docs" / "memory.md"
    assert AUTO_CONTEXT_RULE in " ".join(docs.read_text().split())
    assert "8,192 tokens" in AUTO_CONTEXT_RULE and "never below 2,048" in AUTO_CONTEXT_RULE
    shape = ModelShape(
        file_bytes=100 << 20,
        layers=4,
        embd=256,
        heads=4,
        kv_heads=(4,) * 4,
        key_length=64,
        value_length=64,
        vocab=1000,
        feed_forward=1024,
        trained_context=32768,
    )

    def auto(available: int, cap: int = 0) -> int:
        budget = Budget(total=16 * GIB, available=available, source="test")
        decided = plan(
            shape, ModelSettings(), budget, one_context, default_parallel=1, context_cap=cap
        )
        return decided.context_length

    plenty = 15 * GIB
    assert auto(plenty) == 8192 == auto_context_top(32768, 0)
    assert auto(plenty, cap=32768) == 32768 == auto_context_top(32768, 32768)
    assert auto(plenty, cap=4096) == 4096
    reserve = Budget(16 * GIB, 0, "").reserve

    def cost(n: int) -> int:
        return estimate(shape, one_context(LoadSettings(context_length=n, parallel=1))).total

    between = (cost(4096) + cost(4352)) // 2
    assert auto(reserve + between) == 4096  # the longest multiple of 256 that fits
    assert auto(reserve + cost(2048) - 1) == 2048  # not even 2,048 fits: never less
