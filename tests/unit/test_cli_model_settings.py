"""`models set` flags: what each spelling means, and the mistakes it refuses."""

from __future__ import annotations

import pytest

from lmsp_desktop.cli import build_parser
from lmsp_desktop.cli_model_settings import changed
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.memory import ModelSettings


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
    assert "trained context, at most 8192" in shown
