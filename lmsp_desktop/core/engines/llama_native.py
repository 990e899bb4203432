"""Thin typed wrappers over llama.cpp's low-level C API (llama-cpp-python's ctypes bindings):
load a model once, open a context holding several sequences, fill a token batch, decode.

The high-level `Llama` class holds one sequence per context and its own copy of everything;
the batched engine needs the model, the context and the batch as separate objects.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import logging
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lmsp_desktop.core.engines.base import ProgressSink

log = logging.getLogger(__name__)


def lowlevel() -> Any:
    """llama_cpp's ctypes bindings, imported late: the package has no usable type stubs and
    loads a native library, which code that never runs a model should not pay for.

    OpenMP threads wait at llama.cpp's barriers by sleeping, not spinning (unless the user
    chose otherwise): a prompt read on every core while other processes want them ran
    2.2x faster so (37 s against 84 s for 512 tokens at load 16; docs/prefill.md), and the
    per-token decodes run on one thread, without OpenMP. libgomp reads this when it loads,
    with the first import below."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    module = importlib.import_module("llama_cpp.llama_cpp")
    # llama.cpp logs every load at INFO on stderr: its errors to the log, the rest not.
    from lmsp_desktop.core.engines.llama_bindings import keep_quiet

    keep_quiet(module)
    return module


_BACKEND = threading.Lock()
_backend_ready = False


# Linux x86-64: arch_prctl(ARCH_GET_XCOMP_SUPP) lists the extended CPU states the kernel
# enables; bit 18 is AMX's tile data.
_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, _XFEATURE_XTILEDATA = 158, 0x1022, 18


@functools.cache
def amx_unusable() -> bool:
    """True when the CPU advertises AMX but the kernel (or the hypervisor under it) does not
    enable AMX's tile state. ggml then repacks weights for AMX all the same (it trusts CPUID)
    and its first tile instruction kills the process with SIGILL: seen on this project's VMs
    (cpuinfo amx_tile, XCOMP_SUPP 0x202e7). Such machines load without the extra (repacking)
    buffer types instead."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    if "amx_tile" not in flags:
        return False
    supported = ctypes.c_uint64()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, ctypes.byref(supported)) != 0:
        return True
    return not (supported.value >> _XFEATURE_XTILEDATA) & 1


def _init_backend(lc: Any) -> None:
    global _backend_ready
    with _BACKEND:
        if not _backend_ready:
            lc.llama_backend_init()
            _backend_ready = True


def usable_buffers(params: Any) -> Any:
    """llama.cpp model parameters `params`, without its extra (AMX) weight buffers where AMX
    cannot run (amx_unusable): their kernels died with SIGILL (`tileloadd`) on the first
    prompt of more than one token on the 2-core development VMs. Turning the extra buffers
    off also turns off the CPU repacking (Q4_0 on AVX2), so every other machine (no AMX, or
    AMX the kernel enables) keeps them."""
    if amx_unusable():
        params.use_extra_bufts = False
    return params


def load_model(path: Path, report: ProgressSink, *, gpu_layers: int = 0) -> Any:
    """Load a GGUF file's weights (memory-mapped) once, `gpu_layers` of its layers on the
    GPU (ALL_LAYERS: all); returns a llama_model pointer or raises RuntimeError."""
    lc = lowlevel()
    _init_backend(lc)

    broken: list[bool] = []  # the first failing report is logged, not the hundreds after

    def on_progress(value: float, _user_data: Any) -> bool:
        try:
            report(min(max(float(value), 0.0), 1.0))
        except Exception:  # progress is cosmetic: never abort a load over it, but say so once
            if not broken:
                broken.append(True)
                log.exception("progress report of loading %s failed; loading goes on", path)
        return True

    callback = lc.llama_progress_callback(on_progress)
    params = usable_buffers(lc.llama_model_default_params())
    params.progress_callback = callback
    params.n_gpu_layers = gpu_layers  # negative: every layer (llama.cpp's convention)
    model = lc.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not model:
        raise RuntimeError("llama_model_load_from_file returned no model")
    return model


def kv_ggml_type(kv_type: str) -> int:
    """The ggml type of the KV cache for a LoadSettings.kv_type."""
    lc = lowlevel()
    types = {"f16": lc.GGML_TYPE_F16, "q8_0": lc.GGML_TYPE_Q8_0}
    return int(types[kv_type])


def open_context(
    model: Any,
    *,
    n_ctx_seq: int,
    n_seq: int,
    n_threads: int,
    n_batch: int,
    kv_type: str = "f16",
    flash_attn: bool = False,
) -> Any:
    """A context with `n_seq` sequences of `n_ctx_seq` tokens each. Each sequence has its
    own KV stream (kv_unified off), so one sequence's cache layout never depends on another.
    `kv_type` is K's and V's cache type; `flash_attn` forces flash attention on (llama.cpp
    refuses a quantized V cache without it), else it is off (as llama-cpp-python's Llama has
    it): on the CPU its kernel for fewer than 64 query rows is a scalar loop (70 % of a
    prompt's time in the profile), and with an f16 cache its results depend on the batch
    size and the thread count; without it a token read in a chunk is computed the same
    whatever the chunk (see llama_batch.py, docs/prefill.md)."""
    lc = lowlevel()
    params = lc.llama_context_default_params()
    params.type_k = params.type_v = kv_ggml_type(kv_type)
    params.flash_attn_type = (
        lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.n_ctx = n_ctx_seq * n_seq
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_seq_max = n_seq
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    params.kv_unified = False
    # Sliding-window layers keep a full cache (llama.cpp's default, said here because the
    # memory estimate counts it): the prefix cache reuses any earlier position of a sequence,
    # which a window-sized cache would have dropped.
    params.swa_full = True
    ctx = lc.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError("llama_init_from_model returned no context")
    return ctx


def model_metadata(model: Any) -> dict[str, str]:
    """The GGUF header's key-value pairs as strings."""
    lc = lowlevel()
    out: dict[str, str] = {}
    buf = ctypes.create_string_buffer(1 << 16)
    for i in range(int(lc.llama_model_meta_count(model))):
        n = lc.llama_model_meta_key_by_index(model, i, buf, len(buf))
        if n < 0:
            continue
        key = buf.value.decode("utf-8", errors="replace")
        n = lc.llama_model_meta_val_str_by_index(model, i, buf, len(buf))
        if n < 0:
            continue
        if n >= len(buf):  # a chat template longer than the buffer
            big = ctypes.create_string_buffer(n + 1)
            lc.llama_model_meta_val_str_by_index(model, i, big, len(big))
            out[key] = big.value.decode("utf-8", errors="replace")
        else:
            out[key] = buf.value.decode("utf-8", errors="replace")
    return out


def tokenize(vocab: Any, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
    """`special`: text such as `<|im_end|>` becomes its control token (prompts rendered by a
    chat template); off for user text that is embedded as it is."""
    lc = lowlevel()
    data = text.encode("utf-8")
    capacity = len(data) + 8
    buf = (lc.llama_token * capacity)()
    n = int(lc.llama_tokenize(vocab, data, len(data), buf, capacity, add_bos, special))
    if n < 0:
        capacity = -n
        buf = (lc.llama_token * capacity)()
        n = int(lc.llama_tokenize(vocab, data, len(data), buf, capacity, add_bos, special))
    return [int(t) for t in buf[:n]]


def token_piece(vocab: Any, token: int) -> bytes:
    """The bytes a token stands for (control tokens such as end-of-turn give b"")."""
    lc = lowlevel()
    buf = ctypes.create_string_buffer(64)
    n = int(lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, False))
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = int(lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, False))
    return buf.raw[:n]


class TokenBatch:
    """A reusable llama_batch: (token, position, sequence, wants-logits) rows."""

    def __init__(self, capacity: int) -> None:
        self._lc = lowlevel()
        self.capacity = capacity
        self.raw = self._lc.llama_batch_init(capacity, 0, 1)
        self.size = 0

    def clear(self) -> None:
        self.size = 0

    def add(self, token: int, position: int, seq: int, logits: bool) -> int:
        """Append a row; returns its index (where its logits will be)."""
        i = self.size
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = position
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = logits
        self.size = i + 1
        return i

    def decode(self, ctx: Any) -> int:
        self.raw.n_tokens = self.size
        return int(self._lc.llama_decode(ctx, self.raw))

    def free(self) -> None:
        self._lc.llama_batch_free(self.raw)


class GilHoldingCalls:
    """The short C calls the batching thread makes per token, bound so that they keep the
    GIL. A call through ctypes.CDLL releases the GIL and takes it back; while the event loop
    runs Python, taking it back can wait a whole switch interval (5 ms), so a handful of
    such calls per token made batched decoding slower than one stream (measured: 4 streams
    through the service at 0.5x one stream). llama_decode itself still releases it."""

    def __init__(self) -> None:
        lib = lowlevel()._lib
        holding = ctypes.PyDLL(lib._name, handle=lib._handle)
        self._logits_ith = holding.llama_get_logits_ith
        self._logits_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self._logits_ith.restype = ctypes.c_void_p  # the row's address, an int
        # Read-only numpy views of logits rows by address (the rows of llama.cpp's output
        # buffer): building a view costs 13 us, looking one up 0.1 us.
        self._views: dict[tuple[int, int], npt.NDArray[np.float32]] = {}
        self._is_eog = holding.llama_vocab_is_eog
        self._is_eog.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self._is_eog.restype = ctypes.c_bool

    def logits_view(self, ctx: Any, index: int, n_vocab: int) -> npt.NDArray[np.float32]:
        """The logits of batch row `index` of the last decode, read in place (llama.cpp's
        buffer, not a copy): valid until the context's next decode, read-only. Copying the
        row (the demo's 49,152 floats) cost 19 us per token, as much as its argmax.

        A view is only an address and a length: one kept from an earlier decode is the
        same view when llama.cpp gives that address again (a reallocated buffer gives new
        addresses, and new views)."""
        address = self._logits_ith(ctx, index)
        if not address:
            raise RuntimeError(f"llama_get_logits_ith gave no logits for row {index}")
        key = (address, n_vocab)
        row = self._views.get(key)
        if row is None:
            if len(self._views) >= 256:  # rows of buffers since reallocated
                self._views.clear()
            array = (ctypes.c_float * n_vocab).from_address(address)
            row = self._views[key] = np.ctypeslib.as_array(array)
            row.flags.writeable = False
        return row

    def is_eog(self, vocab: Any, token: int) -> bool:
        return bool(self._is_eog(vocab, token))


def logits_row(ctx: Any, index: int, n_vocab: int) -> npt.NDArray[np.float32]:
    """A copy of the logits of batch row `index` of the last decode."""
    pointer = lowlevel().llama_get_logits_ith(ctx, index)
    row: npt.NDArray[np.float32] = np.ctypeslib.as_array(pointer, shape=(n_vocab,))
    return row.copy()
