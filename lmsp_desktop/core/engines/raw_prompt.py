"""A raw prompt's tokens (legacy completions): the text as it is, no chat template; with a
suffix, fill-in-the-middle through the model's own FIM tokens, in llama.cpp's server order
(prefix-suffix-middle: FIM_PRE prompt FIM_SUF suffix FIM_MID, the model writes the middle).

The llama engine and the token counter both build prompts here, so the count at admission is
the count of the run, and a model without FIM tokens is refused the same way by both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lmsp_desktop.core.errors import LmspError

# Text → tokens, with or without the model's BOS token in front.
Tokenize = Callable[[str, bool], list[int]]


def fim_tokens(lc: Any, vocab: Any) -> tuple[int, int, int] | None:
    """The model's FIM prefix, suffix and middle tokens (llama.cpp reads them from the
    GGUF's tokenizer keys or knows them by their text), or None if it has not all three."""
    found = (
        lc.llama_vocab_fim_pre(vocab),
        lc.llama_vocab_fim_suf(vocab),
        lc.llama_vocab_fim_mid(vocab),
    )
    return None if any(t < 0 for t in found) else (int(found[0]), int(found[1]), int(found[2]))


def no_fim(model: str = "This model") -> LmspError:
    return LmspError(
        f"{model} has no fill-in-the-middle tokens, so `suffix` cannot be used with it. Leave "
        "`suffix` out, or use a code model whose GGUF declares FIM tokens (Qwen2.5-Coder, "
        "StarCoder2, CodeLlama, DeepSeek-Coder).",
        code="fim_unsupported",
        param="suffix",
        status=400,
    )


def raw_prompt_tokens(
    tokenize: Tokenize,
    prompt: str | list[int],
    suffix: str | None,
    fim: tuple[int, int, int] | None,
    add_bos: bool,
    n_vocab: int = 0,
) -> list[int]:
    """The prompt's tokens: as text after BOS, or with a suffix in FIM order; a prompt sent
    as token ids is those tokens as they are (as OpenAI and llama-server take them), each
    within the model's `n_vocab` (0: not checked)."""
    if not isinstance(prompt, str):
        if n_vocab and any(not 0 <= token < n_vocab for token in prompt):
            raise LmspError(
                f"`prompt` holds a token id outside this model's vocabulary (0 to "
                f"{n_vocab - 1}); send token ids of this model's tokenizer, or text.",
                code="invalid_value",
                param="prompt",
                status=400,
            )
        return list(prompt)
    if suffix is None:
        return tokenize(prompt, add_bos)
    if fim is None:
        raise no_fim()
    pre, suf, mid = fim
    head = tokenize("", add_bos)  # BOS alone, for models that expect one
    return [*head, pre, *tokenize(prompt, False), suf, *tokenize(suffix, False), mid]
