"""The context a model runs with, and fitting a request into it before its task exists.

A model runs with its trained context length unless the `max_context` setting caps it; the
same number is reported by `/v1/models` and given to the engine. A request's prompt, as the
runner builds it (tool listing and output notes included), is counted with the model's own
tokenizer and chat template (a vocab-only llama.cpp load, cached per model file, run off
the event loop): an input that does not fit answers 400
`context_length_exceeded` before any task is created, or with `truncation: "auto"` loses its
oldest turns (never a system or developer message) until it fits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.api.task_request import chat_messages
from lmsp_desktop.core.engines.raw_prompt import fim_tokens, raw_prompt_tokens
from lmsp_desktop.core.errors import LmspError, ShuttingDownError
from lmsp_desktop.core.models.memory import CapOrigin
from lmsp_desktop.core.tools.plan import plan_output

log = logging.getLogger(__name__)

# Used when a model file does not say how long a context it was trained with.
FALLBACK_CONTEXT = 4096
UNLIMITED = 2**62
CACHED_VOCABS = 4
KEPT_ROLES = ("system", "developer")
Messages = list[dict[str, Any]]
# An API's own way to shorten an input that does not fit (truncation auto): the messages, a
# count of any candidate's prompt tokens, the context and the request (its output limit)
# → the messages the model is given and their count (they may still not fit: then the
# refusal). Responses drops whole turns (drop_oldest_turns); Ollama single messages.
Shorten = Callable[[Messages, Callable[[Messages], int], int, dict[str, Any]], tuple[Messages, int]]


def effective_context(trained: int | None, cap: int) -> int:
    """The context length a model really runs with: its trained length, capped by the
    setting (0: no cap)."""
    length = trained if trained and trained > 0 else FALLBACK_CONTEXT
    return min(length, cap) if cap > 0 else length


class _Vocab:
    """A model's tokenizer and chat template, loaded without its weights (llama.cpp's own
    tokenizer through its C API, as the engine's; llama_bindings.py: no numpy, no
    llama-cpp-python high-level API in the service process)."""

    def __init__(self, path: Path, template: str | None) -> None:
        from lmsp_desktop.core.engines.llama_bindings import bindings
        from lmsp_desktop.core.engines.llama_chat import ChatRenderer

        lowlevel: Any = bindings()
        self._lc = lowlevel
        params = lowlevel.llama_model_default_params()
        params.vocab_only = True
        model = lowlevel.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise ValueError(f"llama.cpp cannot load a tokenizer from {path}")
        self._model = model
        try:
            self._vocab = lowlevel.llama_model_get_vocab(model)
            self._add_bos = bool(lowlevel.llama_vocab_get_add_bos(self._vocab))
            self._fim = fim_tokens(lowlevel, self._vocab)
            self._renderer = ChatRenderer(
                template,
                bos_token=self._text(lowlevel.llama_vocab_bos(self._vocab)),
                eos_token=self._text(lowlevel.llama_vocab_eos(self._vocab)),
            )
        except BaseException:  # a template Jinja cannot compile: no tokenizer kept
            lowlevel.llama_model_free(model)
            raise
        self._lock = threading.Lock()  # held while llama.cpp tokenizes: close waits for it
        self._closed = False

    def _text(self, token: int) -> str:
        lc = self._lc
        return "" if token < 0 else bytes(lc.llama_vocab_get_text(self._vocab, token)).decode()

    def _tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        """llama_tokenize into a buffer as long as the text (a token is at least a byte but
        for a BOS or a space llama.cpp may add), or, if it asks for more, one that long."""
        size = len(text) + 8
        for _ in range(2):
            buffer = (self._lc.llama_token * size)()
            n = self._lc.llama_tokenize(
                self._vocab, text, len(text), buffer, size, add_bos, special
            )
            if n >= 0:
                return list(buffer[:n])
            size = -n
        raise RuntimeError(f"llama.cpp could not tokenize {len(text)} bytes ({n})")

    def count(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """Prompt tokens exactly as the llama engine tokenizes them (BOS not doubled)."""
        prompt = self._renderer.render(messages, tools)
        bos = self._renderer.bos_token
        add_bos = self._add_bos and not (bos and prompt.startswith(bos))
        with self._lock:
            if self._closed:  # the service stopped while this request was being read
                raise ShuttingDownError()
            # A lone surrogate escape has no UTF-8 form: counted as the engine will see it
            # replaced (the run then fails or answers; admission must not crash).
            raw = prompt.encode("utf-8", "replace")
            return len(self._tokenize(raw, add_bos, True))

    def count_raw(self, prompt: str | list[int], suffix: str | None) -> int:
        """A legacy completion's prompt tokens, as the llama engine builds them (400 for a
        suffix on a model without FIM tokens)."""

        def tokenize(text: str, bos: bool) -> list[int]:
            return self._tokenize(text.encode("utf-8", "replace"), bos, True)

        with self._lock:
            if self._closed:
                raise ShuttingDownError()
            n_vocab = int(self._lc.llama_vocab_n_tokens(self._vocab))
            tokens = raw_prompt_tokens(tokenize, prompt, suffix, self._fim, self._add_bos, n_vocab)
            return len(tokens)

    def count_text(self, text: str) -> int:
        """A plain text's tokens as the engine embeds it (BOS as the model wants, special
        token text left as text)."""
        with self._lock:
            if self._closed:
                raise ShuttingDownError()
            raw = text.encode("utf-8", "replace")
            return len(self._tokenize(raw, self._add_bos, False))

    def close(self) -> None:
        """Free the tokenizer once no thread is counting with it (freeing it under a count
        crashed the process)."""
        with self._lock:
            self._closed = True
            self._free()

    def _free(self) -> None:
        if self._model is not None:
            self._lc.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        # Dropped from the cache (not closed: a count may have been using it), it is freed
        # once no request holds it any more.
        if getattr(self, "_model", None) is not None:
            self._free()


class TokenCounter:
    """Counts prompts per model file; tokenizers stay loaded for the last few models."""

    def __init__(self, cached: int = CACHED_VOCABS) -> None:
        self._cached = cached
        self._vocabs: OrderedDict[tuple[str, int], _Vocab | None] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    def _vocab(self, path: Path, mtime_ns: int, template: str | None) -> _Vocab | None:
        key = (str(path), mtime_ns)
        with self._lock:
            if self._closed:  # a tokenizer loaded now would outlive the service's stop
                raise ShuttingDownError()
            if key in self._vocabs:
                self._vocabs.move_to_end(key)
                return self._vocabs[key]
            try:
                vocab: _Vocab | None = _Vocab(path, template)
            except Exception as exc:  # not a model llama.cpp can read: the run reports it
                log.info("cannot count tokens for %s (%s)", path, exc)
                vocab = None
            self._vocabs[key] = vocab
            while len(self._vocabs) > self._cached:
                # Not closed here: a request may be counting with it in another thread; the
                # tokenizer is freed when the last one lets go of it.
                self._vocabs.popitem(last=False)
            return vocab

    def fit_sync(
        self,
        info: Any,
        request: dict[str, Any],
        limit: int,
        param: str = "input",
        cap: int = 0,
        own: int = 0,
        can_truncate: bool = False,
        cap_origin: CapOrigin = CapOrigin.SETTINGS,
        shorten: Shorten | None = None,
    ) -> int | None:
        """Count the prompt and, if it does not fit, truncate (truncation auto, as the API's
        `shorten` does it; by default the oldest turns are dropped) or refuse
        (the hint told Max context, `cap`, where it came from, `cap_origin`, and the model's
        own context setting, `own`; 0: none; `truncation: "auto"` suggested where the API
        takes it, `can_truncate`).
        Returns the prompt's token count, or None when the model cannot be read here."""
        vocab = self._vocab(Path(info.path), int(info.mtime_ns), info.chat_template)
        if vocab is None:
            return None
        if request.get("prompt") is not None:  # a legacy completion: its text as it is
            count = vocab.count_raw(request["prompt"], request.get("suffix"))
            if count >= limit:
                raise context_exceeded(
                    count, limit, False, param, info, cap, own, cap_origin=cap_origin
                )
            _note_output_room(request, count, limit)
            return count

        def counted(messages: list[dict[str, Any]]) -> int:
            # The prompt the runner will build: with the tool listing and output notes,
            # which can be thousands of tokens (Codex CLI's tools are).
            shown = {**request, "messages": messages}
            plan = plan_output(shown, chat_messages(shown))
            return vocab.count(plan.messages, plan.tools)

        messages = list(request["messages"])
        count = counted(messages)
        truncate = request.get("truncation") == "auto"
        if truncate and count >= limit:
            messages, count = (shorten or drop_oldest_turns)(messages, counted, limit, request)
        if count >= limit:
            tools = None
            if request.get("tools"):  # the refusal alone counts again: what the tools take
                bare = {**request, "messages": messages, "tools": []}
                plan = plan_output(bare, chat_messages(bare))
                tools = count - vocab.count(plan.messages, plan.tools)
            raise context_exceeded(
                count,
                limit,
                # Ollama's chat truncates by itself (its clients send no `truncation`): said
                # only when turns were dropped.
                truncate and (can_truncate or len(messages) < len(request["messages"])),
                param,
                info,
                cap,
                own,
                # Only with older turns to drop does `truncation: "auto"` help.
                can_truncate=can_truncate and drop_oldest_turn(messages) is not None,
                cap_origin=cap_origin,
                tools=tools,
            )
        request["messages"] = messages
        _note_output_room(request, count, limit)
        return count

    async def fit(
        self,
        info: Any,
        request: dict[str, Any],
        limit: int,
        param: str = "input",
        cap: int = 0,
        own: int = 0,
        can_truncate: bool = False,
        cap_origin: CapOrigin = CapOrigin.SETTINGS,
        shorten: Shorten | None = None,
    ) -> int | None:
        if self._unreadable(info):
            return None  # known already: no hop to a thread to learn it again (B1)
        return await asyncio.to_thread(
            self.fit_sync, info, request, limit, param, cap, own, can_truncate, cap_origin, shorten
        )

    def _unreadable(self, info: Any) -> bool:
        """This file is known to have no tokenizer llama.cpp can load (None in the cache).
        Read without the lock: a thread loading a tokenizer holds it for long, and a single
        dict lookup is atomic under the GIL."""
        known: object = self._vocabs.get((str(info.path), int(info.mtime_ns)), self)
        return known is None

    def count_inputs(self, info: Any, inputs: list[str | list[int]]) -> list[int] | None:
        """Each embedding input's token count (token-id inputs as given); None when the
        model cannot be read here."""
        vocab = self._vocab(Path(info.path), int(info.mtime_ns), info.chat_template)
        if vocab is None:
            return None
        return [vocab.count_text(i) if isinstance(i, str) else len(i) for i in inputs]

    async def count(self, info: Any, request: dict[str, Any]) -> int | None:
        """The prompt's token count as the runner will build it, with no limit to fit."""
        return await self.fit(info, request, UNLIMITED)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for vocab in self._vocabs.values():
                if vocab is not None:
                    vocab.close()
            self._vocabs.clear()


def _note_output_room(request: dict[str, Any], count: int, limit: int) -> None:
    """An output limit past what the context leaves after the input is accepted (as
    llama-server and Ollama do) but said on the task: the output stops at the context's
    end, which the answer reports as its output limit (OpenAI's and Anthropic's answers
    have no other reason for it)."""
    wanted = request.get("max_output_tokens")
    room = limit - count
    if limit >= UNLIMITED or not isinstance(wanted, int) or wanted <= room:
        return
    note = (
        f"The output limit asked for ({wanted} tokens) is more than the context leaves after "
        f"the input ({room} of {limit} tokens): the output stops at the context's end."
    )
    # A new list: the request's may be the defaults' own (core/api/task_request.py).
    request["notes"] = [*(request.get("notes") or []), note]


def drop_oldest_turns(
    messages: Messages, count: Callable[[Messages], int], limit: int, request: dict[str, Any]
) -> tuple[Messages, int]:
    """Responses' `truncation: "auto"`: the oldest turns dropped, one by one, until the
    prompt fits (or only the system messages and the last turn are left)."""
    counted = count(messages)
    while counted >= limit:
        shorter = drop_oldest_turn(messages)
        if shorter is None:
            break
        messages = shorter
        counted = count(messages)
    return messages, counted


def drop_oldest_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Without the oldest turn (from the first non-system message to the next user message);
    None when only system/developer messages and the last turn are left."""
    turn = [i for i, m in enumerate(messages) if m.get("role") not in KEPT_ROLES]
    if not turn:
        return None
    start = turn[0]
    end = next((i for i in turn[1:] if messages[i].get("role") == "user"), None)
    if end is None:
        return None  # the last turn is what is being answered: it stays
    return [
        m for i, m in enumerate(messages) if not start <= i < end or m.get("role") in KEPT_ROLES
    ]


def context_exceeded(
    count: int,
    limit: int,
    truncated: bool,
    param: str,
    info: Any = None,
    cap: int = 0,
    own: int = 0,
    *,
    can_truncate: bool = False,
    cap_origin: CapOrigin = CapOrigin.SETTINGS,
    tools: int | None = None,
) -> LmspError:
    """The refusal of an input longer than `limit`, saying what gives the model more: its
    own setting (`own`, 0: auto) where that or the memory holds it, and raising Max context
    (`cap`, 0: none) where that holds it to `limit` or would clamp the setting (a model's
    setting never goes past it); both when both hold. `truncation: "auto"` is suggested
    only where the API takes it (`can_truncate`: Responses; Anthropic's, Ollama's and Chat
    Completions' clients have no such field, and the advice would send them round). A cap
    from this run's `--max-context` flag (`cap_origin`) is not moved by Settings while the
    flag is given: the advice is then the flag's. An input as long as the context the model
    was trained for has no setting to give it more room: it is said so, with a shorter input or
    another model as the ways out. `tools`: the tokens the request's tools take (None: no
    tools), said with Claude Code's way to send none on Anthropic's API (`messages`)."""
    if truncated:
        how = (
            ", even with only the system messages and the last turn left (truncation auto "
            "dropped the older turns); shorten those"
        )
    elif can_truncate:
        how = '; send `truncation: "auto"` to drop the oldest turns, or shorten the input'
    else:
        how = "; shorten the input"
    trained = int(getattr(info, "context_length", 0) or 0)
    if limit < trained <= count:
        # No setting helps (Claude Code's ~20k tokens of tools on an 8k model run with 4k): a
        # larger --context would be clamped to what the model was trained for. (Run with all
        # of it, "this model's context holds" it already says the most it takes.)
        past = f"the {trained} tokens the model was trained for, so no context setting can take it"
        if how == "; shorten the input":
            how = f": it is longer than {past}. Shorten it, or use a model trained for more"
        else:
            how += f". It is longer than {past} (a model trained for more could)"
    elif trained > limit:
        # The usual case with agents (Claude Code's first prompt is ~20k tokens): the model
        # could take more, the service runs it with less to spare memory, or the user's cap.
        wanted = min(trained, 1 << max(count, 1).bit_length())
        from_flag = cap_origin is CapOrigin.FLAG
        raise_cap = (
            f"start the service (or the window) again with `--max-context {wanted}` or more "
            "(Max context in Settings does not apply while the flag is given)"
            if from_flag
            else f"raise Max context to {wanted} or more (Settings; for a service started with "
            f"`lmsp-desktop serve --max-context N`, restart it with `--max-context {wanted}`)"
        )
        ways = []
        capped = 0 < cap < wanted
        # The model's own setting or the memory holds it, or the setting would hold it once
        # the cap is raised (both at the limit: the cap alone would not help).
        set_own = not 0 < cap <= limit or 0 < own < wanted
        if set_own:
            ways.append(
                f"run it with a larger context: `lmsp-desktop models set {info.id} --context "
                f"{wanted}` (or the Models page's settings)"
            )
        if capped:  # Max context holds it, or would clamp that setting
            ways.append(raise_cap)
        holders = []
        if 0 < own < wanted:
            holders.append(f"its own context setting is {own}")
        if capped:
            holders.append(
                f"this run's `--max-context {cap}` caps every model at {cap}"
                if from_flag
                else f"Max context caps every model at {cap}"
            )
        held = " and ".join(holders)
        how += (
            f". The model was trained for {trained} tokens"
            + (f", {held}" if len(holders) > 1 else f" and {held}" if holders else "")
            + ": "
            + ", and ".join(ways)
            + ", memory permitting"
        )
    if tools:
        how += f". Its tools alone are {tools} tokens" + (
            ' (Claude Code sends none with `--tools ""`)' if param == "messages" else ""
        )
    # Opened with OpenAI's own words: clients tell a context error by them ("maximum context
    # length": litellm, and so aider, crewAI; else litellm calls it a BadRequestError and
    # aider retried the same 12k-token prompt for a minute instead of saying it is too long).
    return LmspError(
        f"This model's maximum context length is {limit} tokens (input and output together)"
        f", but the input is {count} tokens long{how}.",
        code="context_length_exceeded",
        param=param,
        status=400,
    )


async def admit(
    counter: TokenCounter | None,
    info: Any,
    request: dict[str, Any],
    cap: int,
    plan: Any = None,
    param: str = "input",
    can_truncate: bool = False,
    shorten: Shorten | None = None,
) -> None:
    """Before a task is created: the request fits the model's context (maybe truncated), or
    400 context_length_exceeded naming `param`. `plan` is the memory plan the model runs
    with (core/models/memory.py: its context and the model's own setting); without one, its
    trained length capped by `cap`. Models without a local GGUF file (an upstream's) are left
    to their engine; a local file may have any name (Ollama's blobs have no extension).
    Where `cap` came from (Settings, or this run's `--max-context` flag) is the plan's
    `cap_origin`; without a plan (a header the fitter cannot read), Settings'."""
    path = getattr(info, "path", None)
    if counter is None or path is None or getattr(info, "source", "upstream") == "upstream":
        return
    origin = CapOrigin.SETTINGS
    if plan is not None:
        limit, own, origin = plan.context_length, plan.own_context or 0, plan.cap_origin
    else:
        limit, own = effective_context(info.context_length, cap), 0
    counted = await counter.fit(
        info, request, limit, param, cap, own, can_truncate, origin, shorten
    )
    if counted is not None:  # known before the task exists (Anthropic's message_start says it)
        request["input_tokens"] = counted
