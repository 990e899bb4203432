"""Measures the two ways one loaded model can serve several requests, to choose between them
(issue 15): one context decoding N sequences per llama_decode (continuous batching), or N
contexts over the one model, each decoding its own sequence in its own thread. Also checks
whether a sequence's logits depend on its batch neighbours (exact resume needs them not to).

    python -m bench.engine_choice [--tokens 48] [--threads 1]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import threading
import time
from typing import Any

import numpy as np

from lmsp_desktop.core.models.demo import demo_model_path

PROMPTS = [
    "<|im_start|>user\nWrite a long story about a dragon.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain how tides work.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nList ten fruits and their colours.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is a prime number?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nDescribe a city at night.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nHow do birds fly?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nTell me about volcanoes.<|im_end|>\n<|im_start|>assistant\n",
]


def lc() -> Any:
    import llama_cpp.llama_cpp as low

    return low


_LOG_CALLBACK: Any = None


def quiet_llama_logs() -> None:
    global _LOG_CALLBACK
    low = lc()
    _LOG_CALLBACK = low.llama_log_callback(lambda _level, _text, _user: None)
    low.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def load_model() -> Any:
    low = lc()
    low.llama_backend_init()
    params = low.llama_model_default_params()
    model = low.llama_model_load_from_file(str(demo_model_path()).encode(), params)
    assert model
    return model


def new_context(model: Any, n_ctx: int, n_seq: int, threads: int, unified: bool) -> Any:
    low = lc()
    params = low.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = 512
    params.n_ubatch = 512
    params.n_seq_max = n_seq
    params.n_threads = threads
    params.n_threads_batch = threads
    params.kv_unified = unified
    ctx = low.llama_init_from_model(model, params)
    assert ctx
    return ctx


def tokenize(model: Any, text: str) -> list[int]:
    low = lc()
    vocab = low.llama_model_get_vocab(model)
    data = text.encode()
    buf = (low.llama_token * (len(data) + 8))()
    n = low.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
    return list(buf[:n])


class Batch:
    def __init__(self, capacity: int, n_seq: int) -> None:
        self.raw = lc().llama_batch_init(capacity, 0, n_seq)

    def fill(self, entries: list[tuple[int, int, int, bool]]) -> None:
        b = self.raw
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        b.n_tokens = len(entries)


def logits_of(ctx: Any, model: Any, index: int) -> np.ndarray:
    low = lc()
    n_vocab = low.llama_vocab_n_tokens(low.llama_model_get_vocab(model))
    ptr = low.llama_get_logits_ith(ctx, index)
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()


def batched_run(
    model: Any, ctx: Any, prompts: list[list[int]], steps: int, *, stagger: int = 0
) -> tuple[list[list[int]], list[list[str]], float]:
    """Greedy-decode every prompt as its own sequence, one llama_decode per step. With
    `stagger`, sequence i starts i*stagger steps late (its prompt prefilled alongside the
    others' single tokens). Returns tokens, per-step logits digests, seconds."""
    low = lc()
    n = len(prompts)
    low.llama_memory_clear(low.llama_get_memory(ctx), True)
    batch = Batch(512, n)
    tokens: list[list[int]] = [[] for _ in range(n)]
    digests: list[list[str]] = [[] for _ in range(n)]
    pos = [0] * n
    started = [False] * n
    start = time.perf_counter()
    step = 0
    while any(len(t) < steps for t in tokens):
        entries: list[tuple[int, int, int, bool]] = []
        owners: list[int] = []
        for s in range(n):
            if len(tokens[s]) >= steps or step < s * stagger:
                continue
            if not started[s]:
                for i, tok in enumerate(prompts[s]):
                    entries.append((tok, i, s, i == len(prompts[s]) - 1))
                pos[s] = len(prompts[s])
                started[s] = True
            else:
                entries.append((tokens[s][-1], pos[s], s, True))
                pos[s] += 1
            owners.append(s)
        batch.fill(entries)
        assert low.llama_decode(ctx, batch.raw) == 0
        out = 0
        for index, entry in enumerate(entries):
            if entry[3]:
                s = owners[out]
                out += 1
                row = logits_of(ctx, model, index)
                digests[s].append(hashlib.sha1(row.tobytes()).hexdigest()[:12])
                tokens[s].append(int(np.argmax(row)))
        step += 1
    return tokens, digests, time.perf_counter() - start


def single_context_run(model: Any, ctx: Any, prompt: list[int], steps: int) -> list[str]:
    _tokens, digests, _t = batched_run(model, ctx, [prompt], steps)
    return digests[0]


def throughput_batched(
    model: Any, prompts: list[list[int]], steps: int, threads: int, unified: bool
) -> None:
    for n in (1, 2, 4, 8):
        ctx = new_context(model, 1024 * n, n, threads, unified=unified)
        best, best_cpu = 0.0, 0.0
        for _ in range(2):
            cpu = time.process_time()
            _tok, _dig, secs = batched_run(model, ctx, prompts[:n], steps)
            cpu = time.process_time() - cpu
            best, best_cpu = max(best, n * steps / secs), max(best_cpu, n * steps / cpu)
        print(
            f"batched   n={n} threads={threads} unified={unified}: {best:6.1f} tok/s in all, "
            f"{best_cpu:6.1f} tokens per CPU-second"
        )
        lc().llama_free(ctx)


def throughput_contexts(model: Any, prompts: list[list[int]], steps: int, threads: int) -> None:
    for n in (1, 2, 4):
        ctxs = [new_context(model, 1024, 1, threads, unified=False) for _ in range(n)]
        start, cpu = time.perf_counter(), time.process_time()
        workers = [
            threading.Thread(target=batched_run, args=(model, ctxs[i], [prompts[i]], steps))
            for i in range(n)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        secs, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(
            f"contexts  n={n} threads={threads} each: {n * steps / secs:6.1f} tok/s in all, "
            f"{n * steps / cpu:6.1f} tokens per CPU-second"
        )
        for c in ctxs:
            lc().llama_free(c)


def neighbour_independence(model: Any, prompts: list[list[int]], steps: int, threads: int) -> None:
    """Sequence 0's logits, step by step, decoded alone and next to 1, 3, 7 neighbours (some
    starting later, their prompts prefilled in the same decode), unified and split KV."""
    for unified in (False, True):
        alone_ctx = new_context(model, 1024 * 8, 8, threads, unified)
        alone = single_context_run(model, alone_ctx, prompts[0], steps)
        for n, stagger in ((2, 0), (4, 3), (8, 2)):
            _t, digests, _s = batched_run(model, alone_ctx, prompts[:n], steps, stagger=stagger)
            same = sum(a == b for a, b in zip(alone, digests[0], strict=True))
            print(
                f"kv_unified={unified!s:5} neighbours={n - 1} stagger={stagger}: "
                f"{same}/{steps} steps with bit-identical logits for sequence 0"
            )
        lc().llama_free(alone_ctx)


def long_neighbour(model: Any, prompts: list[list[int]], steps: int, threads: int) -> None:
    """Sequence 0 decodes token by token while a neighbour's long prompt (300 tokens) is
    prefilled in the same llama_decode: are sequence 0's logits still its solo logits?"""
    low = lc()
    ctx = new_context(model, 4096, 2, threads, unified=False)
    _t, solo, _s = batched_run(model, ctx, [prompts[0]], steps)
    long_prompt = (prompts[1] * 25)[:300]
    low.llama_memory_clear(low.llama_get_memory(ctx), True)
    batch = Batch(512, 2)
    batch.fill([(t, i, 0, i == len(prompts[0]) - 1) for i, t in enumerate(prompts[0])])
    assert low.llama_decode(ctx, batch.raw) == 0
    row = logits_of(ctx, model, len(prompts[0]) - 1)
    digests = [hashlib.sha1(row.tobytes()).hexdigest()[:12]]
    token, pos = int(np.argmax(row)), len(prompts[0])
    for step in range(1, steps):
        entries = [(token, pos, 0, True)]
        if step == 3:
            entries += [(t, i, 1, False) for i, t in enumerate(long_prompt)]
        batch.fill(entries)
        assert low.llama_decode(ctx, batch.raw) == 0
        row = logits_of(ctx, model, 0)
        digests.append(hashlib.sha1(row.tobytes()).hexdigest()[:12])
        token, pos = int(np.argmax(row)), pos + 1
    same = sum(a == b for a, b in zip(solo[0], digests, strict=True))
    print(f"a 300-token prefill of a neighbour in step 3: {same}/{steps} steps identical")
    lc().llama_free(ctx)


def chunking_independence(model: Any, prompts: list[list[int]], steps: int, threads: int) -> None:
    """The logits after prompt + generated tokens, evaluated in different chunkings: the
    prompt as one batch then the tokens one by one (how a first run does it), everything as
    one batch (a prefix cache rebuilt), and chunks of 7 and 64 (chunked prefill)."""
    low = lc()
    ctx = new_context(model, 2048, 1, threads, unified=False)
    tokens, _d, _s = batched_run(model, ctx, [prompts[0]], steps)
    sequence = prompts[0] + tokens[0][:-1]
    batch = Batch(512, 1)

    def final_logits(chunk: int | None, first: int) -> str:
        low.llama_memory_clear(low.llama_get_memory(ctx), True)
        pos = 0
        pieces = [sequence[:first]] if first else []
        rest = sequence[first:]
        size = chunk or len(rest)
        pieces += [rest[i : i + size] for i in range(0, len(rest), size)]
        for piece in pieces:
            batch.fill([(t, pos + i, 0, i == len(piece) - 1) for i, t in enumerate(piece)])
            assert low.llama_decode(ctx, batch.raw) == 0
            pos += len(piece)
        return hashlib.sha1(logits_of(ctx, model, len(pieces[-1]) - 1).tobytes()).hexdigest()[:12]

    first_run = final_logits(1, len(prompts[0]))
    for name, chunk, first in (
        ("one batch", None, 0),
        ("chunks of 7", 7, 0),
        ("chunks of 8", 8, 0),
        ("chunks of 16", 16, 0),
        ("chunks of 32", 32, 0),
        ("chunks of 40", 40, 0),
        ("chunks of 48", 48, 0),
        ("chunks of 56", 56, 0),
        ("chunks of 64", 64, 0),
        ("token by token", 1, 0),
    ):
        same = final_logits(chunk, first) == first_run
        print(f"prompt+{steps - 1} tokens as {name}: logits {'identical' if same else 'DIFFER'}")
    lc().llama_free(ctx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-numerics", action="store_true")
    args = parser.parse_args()
    quiet_llama_logs()
    model = load_model()
    prompts = [tokenize(model, p) for p in PROMPTS]
    if not args.skip_numerics:
        neighbour_independence(model, prompts, args.tokens, args.threads)
        chunking_independence(model, prompts, 80, args.threads)
        long_neighbour(model, prompts, args.tokens, args.threads)
    if not args.skip_speed:
        throughput_batched(model, prompts, args.tokens, args.threads, unified=False)
        throughput_batched(model, prompts, args.tokens, args.threads, unified=True)
        throughput_contexts(model, prompts, args.tokens, args.threads)


if __name__ == "__main__":
    main()
