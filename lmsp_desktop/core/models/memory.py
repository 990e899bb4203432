"""What loading a model costs, from its GGUF header alone, and the settings that fit.

Weights (the file, memory-mapped), the KV cache for the contexts the engine will open
(2 × layers × KV heads × head size × bytes per element, per token; sliding-window layers only
their window unless the engine keeps a full cache) and compute buffers, at their worst once
the contexts fill, held against the memory available (core/models/machine.py). The default
context is the largest that fits the budget; docs/memory.md states the rule and how close
the estimate came to llama.cpp's own figures and to real loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal

from lmsp_desktop.core.engines.base import (
    ALL_LAYERS,
    EMBEDDING_CONTEXT,
    EMBEDDING_MIN_CONTEXT,
    ContextShape,
    KvType,
    LoadSettings,
)
from lmsp_desktop.core.models.gguf_meta import GGUFMeta

GIB = 1 << 30
# The memory budget leaves the larger of these free for everything else on the machine.
RESERVE_MIN = 2 * GIB
RESERVE_SHARE = 0.20
# Default context per request: the trained one, at most this (as llama.cpp's examples, LM
# Studio and Ollama default to 4-8k: the KV cache of a 128k context is rarely worth its
# memory), and less when the budget is short, never below MIN_CONTEXT.
DEFAULT_CONTEXT_CAP = 8192
MIN_CONTEXT = 2048
# The least context a setting may ask for (a model's own, or Max context): below it no chat
# template and prompt fit, and llama.cpp's pooling needs a context it can split evenly.
SMALLEST_CONTEXT = MIN_CONTEXT // 8
CONTEXT_STEP = 256  # llama.cpp pads each KV stream to 256 cells
FALLBACK_CONTEXT = 4096  # a header that does not say


class CapOrigin(Enum):
    """Where this run's Max context (the cap on every model's context) came from. The
    `--max-context` flag wins over Settings for the run it starts and is never saved, so the
    words that tell the user how to raise the cap (context_window.context_exceeded's 400)
    name the one that holds it: saving another Max context in Settings does not move a
    flag's cap. Carried beside the cap (the fitter, each Plan), never inside the number."""

    SETTINGS = "settings"
    FLAG = "flag"


# Bytes per cache element: f16 2; q8_0 blocks of 32 values in 34 bytes.
KV_BYTES: dict[str, float] = {"f16": 2.0, "q8_0": 34 / 32}
# Sliding-window layers of architectures whose header does not mark them (as llama.cpp's
# llama-model.cpp sets them): every n-th layer is a full-attention one.
SWA_PATTERNS: dict[str, int] = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}
# Calibrated on this machine (docs/memory.md): the fixed part of what each llama.cpp context
# adds beyond weights and KV cache (graph, scheduler, thread state), measured as RSS.
COMPUTE_BASE = 5 << 20
# Free GPU memory left unused when offloading ("auto"), for the driver and other programs.
GPU_RESERVE = 512 << 20
# What a model's context `auto` (not set) runs with, in words: `plan` below. One sentence for
# the window's Load settings box, `models set --help` and docs/memory.md, so none of them
# says less (the window once said "fit the memory", silent on the 8,192 cap).
AUTO_CONTEXT_RULE = (
    f"the model's trained context, at most {DEFAULT_CONTEXT_CAP:,} tokens (or the Max context "
    "setting, when set), and less when the memory budget (the memory free less a reserve) "
    f"cannot hold that load: the longest multiple of {CONTEXT_STEP} that fits, never below "
    f"{MIN_CONTEXT:,}"
)

Fit = Literal["fits", "tight", "wont_fit"]


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs from a model's header."""

    file_bytes: int
    layers: int
    embd: int
    heads: int
    kv_heads: tuple[int, ...]  # per layer
    key_length: int
    value_length: int
    vocab: int
    feed_forward: int
    trained_context: int | None
    swa_window: int = 0  # tokens; 0: no sliding-window layers
    swa_layers: tuple[bool, ...] = ()  # per layer: True for a sliding-window layer
    layer_bytes: tuple[int, ...] = ()  # tensor bytes of each layer

    @classmethod
    def from_gguf(cls, meta: GGUFMeta, file_bytes: int) -> ModelShape:
        values: dict[str, Any] = meta.values
        arch = meta.architecture or ""

        def number(key: str, default: int = 0) -> int:
            value = values.get(f"{arch}.{key}")
            if isinstance(value, list):  # per-layer values: the largest stands for all
                value = max((v for v in value if isinstance(v, int)), default=None)
            return value if isinstance(value, int) and not isinstance(value, bool) else default

        layers = number("block_count")
        embd = number("embedding_length")
        heads = max(1, number("attention.head_count", 1))
        raw_kv = values.get(f"{arch}.attention.head_count_kv")
        if isinstance(raw_kv, list) and len(raw_kv) == layers:
            kv_heads = tuple(int(v) for v in raw_kv)
        else:
            kv_heads = (number("attention.head_count_kv", heads),) * layers
        head = embd // heads if embd else 0
        window = number("attention.sliding_window")
        swa = _swa_layers(arch, values, layers) if window else ()
        return cls(
            file_bytes=file_bytes,
            layers=layers,
            embd=embd,
            heads=heads,
            kv_heads=kv_heads,
            key_length=number("attention.key_length", head),
            value_length=number("attention.value_length", head),
            vocab=meta.vocab_size or number("vocab_size", 32000),
            feed_forward=number("feed_forward_length", 4 * embd),
            trained_context=meta.context_length,
            swa_window=window if any(swa) else 0,
            swa_layers=swa,
            layer_bytes=tuple(meta.layer_bytes.get(i, 0) for i in range(layers)),
        )

    def kv_bytes_per_token(self, kv_type: KvType, layer: int) -> float:
        return self.kv_heads[layer] * (self.key_length + self.value_length) * KV_BYTES[kv_type]


def _swa_layers(arch: str, values: dict[str, Any], layers: int) -> tuple[bool, ...]:
    marked = values.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(marked, list) and len(marked) == layers:
        return tuple(bool(v) for v in marked)
    every = marked if isinstance(marked, int) and marked > 0 else SWA_PATTERNS.get(arch)
    if not every:
        return (False,) * layers  # not known: count every layer full (never underestimate)
    return tuple((i + 1) % every != 0 for i in range(layers))


@dataclass(frozen=True)
class Estimate:
    """Bytes a load takes once its contexts fill: in RAM (weights not offloaded, KV cache,
    compute) and on the GPU. Each part is what llama.cpp allocates for it and a long prompt
    makes resident (docs/memory.md, "How close it is"). `embedding` is not part of the load:
    the context a first embedding opens, at its largest; it opens only for an embedding, at
    the size its inputs need, and is checked against the memory available then
    (embedding_refusal), so a model only asked to chat is never held to it."""

    weights: int
    kv_cache: int
    compute: int
    gpu: int = 0
    embedding: int = 0

    @property
    def total(self) -> int:
        """RAM the load takes (the `memory_estimate` of /v1/models, what a load is refused
        against)."""
        return self.weights + self.kv_cache + self.compute


def _pad(n: int) -> int:
    return -(-n // CONTEXT_STEP) * CONTEXT_STEP


def estimate(
    shape: ModelShape,
    contexts: list[ContextShape],
    kv_type: KvType = "f16",
    gpu_layers: int = 0,
    *,
    swa_full: bool = True,
) -> Estimate:
    """The cost of opening `contexts` over the model with `gpu_layers` of its layers on the
    GPU (their weights and KV cache go there)."""
    on_gpu = shape.layers if gpu_layers < 0 else min(gpu_layers, shape.layers)
    first_gpu = shape.layers - on_gpu  # llama.cpp offloads the last layers first
    host_kv = gpu_kv = 0.0
    for ctx in contexts:
        cells = _pad(ctx.n_ctx_seq)
        window = _pad(min(ctx.n_ctx_seq, shape.swa_window + ctx.n_batch)) if shape.swa_window else 0
        for layer in range(shape.layers):
            sliding = bool(shape.swa_layers) and shape.swa_layers[layer] and not swa_full
            size = ctx.n_seq * (window if sliding else cells)
            cost = size * shape.kv_bytes_per_token(kv_type, layer)
            if layer >= first_gpu:
                gpu_kv += cost
            else:
                host_kv += cost
    gpu_weights = sum(shape.layer_bytes[first_gpu:]) if on_gpu else 0
    flash_attn = LoadSettings(kv_type=kv_type).flash_attn  # as the engine opens them
    compute = sum(_compute(shape, ctx, flash_attn) for ctx in contexts)
    longest = max((ctx.n_ctx_seq for ctx in contexts), default=EMBEDDING_CONTEXT)
    return Estimate(
        weights=shape.file_bytes - gpu_weights,
        kv_cache=int(host_kv),
        compute=compute,
        gpu=int(gpu_kv + gpu_weights),
        embedding=_embedding(shape, longest),
    )


def _embedding(shape: ModelShape, n_ctx: int) -> int:
    """The embedding context a model's first embedding opens (llama_embed.py), at its worst:
    an input as long as it holds (the chat context, at most EMBEDDING_CONTEXT). Its KV cache
    (f16, one stream; counted in RAM even with GPU layers), the logits llama.cpp computes for
    every token of the input and copies out (2 x vocabulary x 4 bytes a token), the layers'
    activations and a fixed part. Measured for the demo (docs/memory.md): 211 MiB after a
    512-token input, 833 MiB after a 2,048-token one; this gives 219 and 860 MiB. Not part
    of a load's total (Estimate): held against the memory when it opens."""
    rows = min(n_ctx, EMBEDDING_CONTEXT)
    per_token = sum(shape.kv_bytes_per_token("f16", layer) for layer in range(shape.layers))
    logits = rows * shape.vocab * 4 * 2
    activations = rows * (2 * shape.feed_forward + 4 * shape.embd) * 4
    return int(_pad(rows) * per_token) + logits + activations + COMPUTE_BASE


def _compute(shape: ModelShape, ctx: ContextShape, flash_attn: bool) -> int:
    """What llama.cpp's compute for one context makes resident at worst: a prompt chunk of
    `n_batch` rows read at the end of a full context. Without flash attention (the f16
    cache, docs/prefill.md) that is the attention scores of every head over every cell, in
    f32 and in the f16 copy the matrix product makes of them, with the mask; with flash
    attention (q8_0) only the mask. Plus the layers' activations of those rows, one row of
    logits per sequence (only the last row of a chunk is sampled: llama.cpp's reservation
    for logits of every row is never touched) and a fixed part. For one context of 2 x 8,192
    tokens (docs/memory.md) llama.cpp's log says "compute buffer size = 166.38 MiB" (its
    peak: the f32 scores and the mask), and ggml's CPU backend adds a work buffer of 72 MiB
    the log does not show (the f16 copy of the scores for their product with V): 238 MiB,
    against 248 MiB here; 226 MiB became resident after an 8,100-token prompt. With flash
    attention llama.cpp's 99 MiB are the logits of 512 rows, never computed (22 MiB
    resident; 32 MiB here)."""
    rows = ctx.n_batch
    cells = _pad(ctx.n_ctx_seq)
    activations = rows * (2 * shape.feed_forward + 4 * shape.embd) * 4
    mask = rows * cells * 4
    scores = 0 if flash_attn else rows * cells * shape.heads * (4 + 2)
    outputs = shape.vocab * 4 * ctx.n_seq
    return COMPUTE_BASE + activations + mask + scores + outputs


@dataclass(frozen=True)
class Budget:
    """RAM a load may take: `available` now, `budget` when leaving the reserve free."""

    total: int
    available: int
    source: str

    @property
    def reserve(self) -> int:
        return max(RESERVE_MIN, int(self.total * RESERVE_SHARE))

    @property
    def budget(self) -> int:
        return max(0, self.available - self.reserve)

    def fit(self, need: int) -> Fit:
        if need <= self.budget:
            return "fits"
        return "tight" if need <= self.available else "wont_fit"


def context_refusal(shape: ModelShape, ctx: ContextShape, kv_type: KvType, budget: Budget) -> str:
    """Why one more context (a model's contexts opened when a second request comes, the
    service's workers) must not open now, or "" when it fits: its KV cache and buffers held
    against the memory available now, as a load's plan (Budget.fit), the reserve kept free.
    A load that left less than the reserve free was warned of ("tight"); an optional
    context never takes that memory: the requests share the open contexts' sequences
    instead. Counted in RAM even with GPU layers (the worker does not ask the GPU): too
    much, never too little."""
    cost = estimate(shape, [ctx], kv_type)
    need = cost.kv_cache + cost.compute
    if budget.fit(need) == "fits":
        return ""
    return (
        f"another context needs about {gib(need)} (KV cache {gib(cost.kv_cache)}, buffers "
        f"{gib(cost.compute)}), and {gib(budget.available)} is available ({budget.source}), "
        f"of which {gib(budget.reserve)} is kept free"
    )


def embedding_refusal(shape: ModelShape, n_ctx: int, budget: Budget, optional: bool = False) -> str:
    """Why a model's embedding context of `n_ctx` tokens must not open now, or "" when it
    may: its estimate at that size (an input as long as it holds) against the memory
    available now. The size the inputs need is refused as a load is, only when it cannot
    fit at all (an embedding cannot do without it), not when it leaves less than the
    reserve free; a larger, `optional` one (more inputs per decode) keeps the reserve free."""
    need = _embedding(shape, n_ctx)
    if budget.fit(need) == "fits" or (not optional and budget.fit(need) == "tight"):
        return ""
    shorter = " or split the input into shorter pieces" if n_ctx > EMBEDDING_MIN_CONTEXT else ""
    return (
        f"The embedding context needs about {gib(need)} (inputs up to "
        f"{min(n_ctx, EMBEDDING_CONTEXT)} tokens), more than the {gib(budget.available)} "
        f"available ({budget.source}). Free memory (unload other models){shorter}, then try "
        "again."
    )


@dataclass(frozen=True)
class Plan:
    """A load decided: the settings, what they cost, and how that sits with the memory."""

    settings: LoadSettings
    trained_context: int | None
    estimate: Estimate
    fit: Fit
    budget: Budget
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    own_context: int | None = None  # the model's own context setting (None: auto)
    cap_origin: CapOrigin = CapOrigin.SETTINGS  # where the Max context it was fitted to is from

    @property
    def context_length(self) -> int:
        assert self.settings.context_length is not None
        return self.settings.context_length


Shapes = Callable[[LoadSettings], list[ContextShape]]  # the engine's layout


def one_context(settings: LoadSettings) -> list[ContextShape]:
    """The layout of an engine that does not say its own: one context of all sequences."""
    return [ContextShape(settings.parallel or 1, settings.context_length or FALLBACK_CONTEXT, 512)]


@dataclass(frozen=True)
class ModelSettings:
    """A model's own settings, as the user set them (`models set`, the Models page); None
    leaves the choice to the service: context fitted to memory, the global concurrency,
    GPU layers `auto`."""

    context_length: int | None = None
    parallel: int | None = None
    kv_type: KvType = "f16"
    gpu_layers: int | None = None  # None: auto; ALL_LAYERS: all

    def describe(self) -> str:
        gpu = (
            "auto"
            if self.gpu_layers is None
            else "all"
            if self.gpu_layers < 0
            else str(self.gpu_layers)
        )
        return (
            f"context {self.context_length or 'auto'}, parallel {self.parallel or 'default'}, "
            f"kv {self.kv_type}, gpu layers {gpu}"
        )


def plan(
    shape: ModelShape,
    wanted: ModelSettings,
    budget: Budget,
    shapes_of: Shapes,
    *,
    default_parallel: int,
    context_cap: int = 0,
    cap_origin: CapOrigin = CapOrigin.SETTINGS,
    gpus: list[int] | None = None,
) -> Plan:
    """The settings a load runs with: `wanted` (context None: the largest that fits the
    budget; gpu_layers None: auto against `gpus`' free bytes), each request's context capped
    at the trained one and at `context_cap` (the global setting, 0: none; from `cap_origin`,
    which the plan keeps for the words that say how to raise it)."""
    trained = shape.trained_context if shape.trained_context else None
    ceiling = trained or FALLBACK_CONTEXT
    if context_cap > 0:
        ceiling = min(ceiling, context_cap)
    settings = LoadSettings(
        context_length=min(wanted.context_length, ceiling) if wanted.context_length else None,
        parallel=wanted.parallel or default_parallel,
        kv_type=wanted.kv_type,
        gpu_layers=0 if wanted.gpu_layers is None else wanted.gpu_layers,
    )
    auto = wanted.gpu_layers is None
    if settings.context_length is None:
        # GPU layers first at the smallest context, then the context fitted to what is left.
        small = replace(settings, context_length=min(MIN_CONTEXT, ceiling))
        settings = replace(
            settings,
            gpu_layers=_with_gpu_layers(shape, small, shapes_of, gpus, auto=auto).gpu_layers,
        )
        top = auto_context_top(trained, context_cap)
        best = _largest_context(shape, settings, budget, shapes_of, top, bool(gpus))
        settings = replace(settings, context_length=best)
    settings = _with_gpu_layers(shape, settings, shapes_of, gpus, auto=auto)
    cost = estimate(shape, shapes_of(settings), settings.kv_type, _offloaded(settings, gpus))
    verdict = budget.fit(cost.total)
    reason = "" if verdict == "fits" else _why(cost, budget, settings, verdict)
    if gpus and cost.gpu > max(gpus):
        # The layers asked for do not fit the device: llama.cpp would fail mid-load.
        verdict = "wont_fit"
        reason = (
            f"The {_layers(settings.gpu_layers)} on the GPU need about {gib(cost.gpu)}, more "
            f"than the {gib(max(gpus))} free on it. Lower the GPU layers (or set them to "
            "auto), the context length or the concurrent requests."
        )
    return Plan(
        settings,
        trained,
        cost,
        verdict,
        budget,
        reason,
        own_context=wanted.context_length,
        cap_origin=cap_origin,
    )


def auto_context_top(trained: int | None, context_cap: int) -> int:
    """The longest context `auto` gives a model (AUTO_CONTEXT_RULE): its trained context
    (FALLBACK_CONTEXT when the header does not say), at most `context_cap` (the Max context
    setting) when set, else at most DEFAULT_CONTEXT_CAP; the budget may make it less. The
    user's global cap replaces the default one: asked for, a 32k context is meant."""
    ceiling = trained or FALLBACK_CONTEXT
    return min(ceiling, context_cap if context_cap > 0 else DEFAULT_CONTEXT_CAP)


def _layers(gpu_layers: int) -> str:
    return "all layers" if gpu_layers < 0 else f"{gpu_layers} layers"


def _offloaded(settings: LoadSettings, gpus: list[int] | None) -> int:
    """The layers that really leave RAM: none without a GPU (a CPU build keeps every layer
    in RAM whatever n_gpu_layers says)."""
    return settings.gpu_layers if gpus else 0


def _largest_context(
    shape: ModelShape,
    settings: LoadSettings,
    budget: Budget,
    shapes_of: Shapes,
    top: int,
    gpu: bool,
) -> int:
    """The default context: the largest step up to `top` whose load fits the budget;
    MIN_CONTEXT (or `top`, if smaller) when none does."""
    floor = min(MIN_CONTEXT, top)

    def cost(n: int) -> int:
        trial = replace(settings, context_length=n)
        layers = trial.gpu_layers if gpu else 0
        return estimate(shape, shapes_of(trial), trial.kv_type, layers).total

    if cost(top) <= budget.budget:
        return top
    low, high = floor, top  # cost(high) does not fit
    if cost(low) > budget.budget:
        return floor
    while high - low > CONTEXT_STEP:
        mid = (low + high) // 2 // CONTEXT_STEP * CONTEXT_STEP
        if mid <= low:
            break
        low, high = (mid, high) if cost(mid) <= budget.budget else (low, mid)
    return low


def fit_gpu_layers(layer_costs: list[int], free: int, reserve: int = GPU_RESERVE) -> int:
    """How many of the last layers fit in `free` device bytes (llama.cpp offloads from the
    last layer down), keeping `reserve` free; len(layer_costs) when all fit."""
    room = free - reserve
    used = 0
    count = 0
    for cost in reversed(layer_costs):
        if used + cost > room:
            break
        used += cost
        count += 1
    return count


def _with_gpu_layers(
    shape: ModelShape,
    settings: LoadSettings,
    shapes_of: Shapes,
    gpus: list[int] | None,
    *,
    auto: bool,
) -> LoadSettings:
    if not auto:
        return settings
    if not gpus:
        return replace(settings, gpu_layers=0)
    # Each layer takes its weights and its share of every context's KV cache.
    kv = estimate(shape, shapes_of(settings), settings.kv_type, ALL_LAYERS).gpu
    weights = sum(shape.layer_bytes)
    per_layer_kv = (kv - weights) / max(1, shape.layers)
    costs = [b + math.ceil(per_layer_kv) for b in shape.layer_bytes]
    layers = fit_gpu_layers(costs, max(gpus))
    return replace(settings, gpu_layers=ALL_LAYERS if layers == shape.layers else layers)


def _why(cost: Estimate, budget: Budget, settings: LoadSettings, verdict: Fit) -> str:
    need = (
        f"needs about {gib(cost.total)} once its contexts fill (weights {gib(cost.weights)}, "
        f"KV cache {gib(cost.kv_cache)}, buffers {gib(cost.compute)})"
    )
    if verdict == "tight":
        return (
            f"This load {need}: it fits the {gib(budget.available)} available "
            f"({budget.source}) but leaves less than {gib(budget.reserve)} free."
        )
    lower = "the context length or concurrent requests"
    if settings.kv_type == "f16":
        lower += ", or use the q8_0 KV cache type"
    return (
        f"This load {need}, more than the {gib(budget.available)} available "
        f"({budget.source}). Lower {lower}, or free memory."
    )


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"
