"""A header-only GGUF reader: the key-values and tensor shapes, never the tensor data.

`gguf.GGUFReader` maps every tensor (seconds on a 100 MB model); the models panel needs a
handful of header values, which this reads in milliseconds. The type codes and file-type
names come from the `gguf` package's `constants` module, loaded on its own (see below).
"""

from __future__ import annotations

import importlib.util
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO

from lmsp_desktop.core.models.discovery import part_paths

if TYPE_CHECKING:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType


def _gguf_constants() -> ModuleType:
    """`gguf/constants.py` alone (it imports only the standard library). `import gguf.constants`
    first runs `gguf/__init__`, which imports numpy and the tensor reader and writer: ~0.5 s of
    CPU in every process that reads a header (each CLI command, `serve`), for a few enums.
    Loaded under a private name so that a later `import gguf` gets its own, untouched copy.
    Where the package is no folder of .py files (the packaged app keeps it in PyInstaller's
    archive, or a zip), the plain import: slower, but the app starts."""
    name = "lmsp_desktop._gguf_constants"
    if name not in sys.modules:
        package = importlib.util.find_spec("gguf")  # finds the folder, runs nothing
        assert package is not None
        folders = list(package.submodule_search_locations or [])
        path = Path(folders[0]) / "constants.py" if folders else None
        if path is None or not path.is_file():
            import gguf.constants

            return gguf.constants
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up while it runs
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


if not TYPE_CHECKING:
    _constants = _gguf_constants()
    GGML_QUANT_SIZES = _constants.GGML_QUANT_SIZES
    GGMLQuantizationType = _constants.GGMLQuantizationType
    GGUFValueType = _constants.GGUFValueType
    LlamaFileType = _constants.LlamaFileType

GGUF_MAGIC = b"GGUF"
READ_SIZE = 1024 * 1024
# Arrays whose contents are kept (others are skipped): small ones are cheap and sometimes
# useful (general.languages); the vocabulary (~50k strings) is not needed here.
MAX_KEPT_ARRAY = 64

_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
_QUANT_IN_NAME = re.compile(
    r"(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|TQ\d_\d|MXFP4(?:_MOE)?)(?=$|[-_.])",
    re.IGNORECASE,
)


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands (bad magic, truncated, garbage)."""


class GGUFTruncated(GGUFError):
    """The header is whole, but the file is shorter than its tensors need (a cut copy)."""


@dataclass
class GGUFMeta:
    """What the registry keeps from a model's header."""

    version: int
    tensor_count: int
    architecture: str | None = None
    name: str | None = None
    parameters: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    chat_template: str | None = None
    # Every scalar key-value and small array, for display and cross-checks.
    values: dict[str, Any] = field(default_factory=dict)
    # What the memory estimate needs beyond the key-values (core/models/memory.py): the
    # vocabulary size (rows of token_embd.weight) and the tensor bytes of each layer (blk.N).
    vocab_size: int | None = None
    layer_bytes: dict[int, int] = field(default_factory=dict)
    # The elements of its tensors, counted (`parameters` is the header's own count if it has
    # one): a split model's parts each count their own (scan_rows.read_meta adds them up).
    tensor_elements: int = 0


class _Cursor:
    """Sequential reads from a file through a refillable buffer (struct.unpack_from on bytes
    is far cheaper than one file read per value, which matters for 100k vocabulary strings)."""

    def __init__(self, f: BinaryIO, file_size: int, endian: str = "<") -> None:
        self.f = f
        self.file_size = file_size
        self.endian = endian
        self.buf = b""
        self.pos = 0
        self.base = 0  # file offset of buf[0]

    def offset(self) -> int:
        return self.base + self.pos

    def need(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            return
        if self.offset() + n > self.file_size:
            raise GGUFError(f"the header is truncated at byte {self.offset()}")
        rest = self.buf[self.pos :]
        self.base += self.pos
        self.f.seek(self.base + len(rest))
        more = self.f.read(max(READ_SIZE, n - len(rest)))
        self.buf = rest + more
        self.pos = 0
        if len(self.buf) < n:
            raise GGUFError(f"the header is truncated at byte {self.offset()}")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        value = struct.unpack_from(self.endian + fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        self.need(n)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        # The vocabulary is ~100k strings: a tight loop on local names, refilling rarely.
        unpack_from = struct.Struct(self.endian + "Q").unpack_from
        buf, pos, end = self.buf, self.pos, len(self.buf)
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self.need(8)
                buf, pos, end = self.buf, self.pos, len(self.buf)
            n = unpack_from(buf, pos)[0]
            pos += 8 + n
            if pos > end:
                if n > self.file_size:
                    raise GGUFError(f"a string length is larger than the file at {self.offset()}")
                self.pos = pos - n
                self.need(n)
                buf, pos, end = self.buf, self.pos + n, len(self.buf)
        self.pos = pos

    def skip(self, n: int) -> None:
        if self.offset() + n > self.file_size:
            raise GGUFError(f"the header is truncated at byte {self.offset()}")
        if self.pos + n <= len(self.buf):
            self.pos += n
        else:
            self.base = self.offset() + n
            self.buf, self.pos = b"", 0


def _value(cur: _Cursor, vtype: int) -> Any:
    if vtype == GGUFValueType.STRING:
        return cur.string()
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype])
    if vtype == GGUFValueType.ARRAY:
        item_type = cur.unpack("I")
        count = cur.unpack("Q")
        if count > cur.file_size:
            raise GGUFError(f"an array length is larger than the file at {cur.offset()}")
        if count <= MAX_KEPT_ARRAY and item_type != GGUFValueType.ARRAY:
            return [_value(cur, item_type) for _ in range(count)]
        if item_type == GGUFValueType.STRING:
            cur.skip_strings(count)
        elif item_type in _SCALARS:
            cur.skip(count * struct.calcsize(_SCALARS[item_type]))
        else:  # nested arrays: no model uses them, walk them rather than guess
            for _ in range(count):
                _value(cur, item_type)
        return None
    raise GGUFError(f"unknown value type {vtype} at byte {cur.offset()}")


def _quant_from_file_type(file_type: object) -> str | None:
    if not isinstance(file_type, int):
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    if name == "GUESSED":
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def quant_from_filename(filename: str) -> str | None:
    """`Foo-7B-Q4_K_M.gguf` → `Q4_K_M` (the naming convention of most published GGUFs)."""
    stem = filename[: -len(".gguf")] if filename.lower().endswith(".gguf") else filename
    matches = _QUANT_IN_NAME.findall(stem)
    return matches[-1].upper() if matches else None


def _quant_from_tensors(types: dict[int, int]) -> str | None:
    """The type holding most of the weights, as a last resort."""
    if not types:
        return None
    code = max(types, key=lambda t: types[t])
    try:
        return GGMLQuantizationType(code).name
    except ValueError:
        return None


def read_gguf_meta(path: Path) -> GGUFMeta:
    """Read the header of the GGUF file at `path` (blocking; milliseconds)."""
    with open(path, "rb") as f:
        file_size = f.seek(0, 2)
        f.seek(0)
        if file_size == 0:  # an empty file (a copy or download that never started)
            raise GGUFError("the file is empty (0 bytes)")
        if f.read(4) != GGUF_MAGIC:
            raise GGUFError("the file does not start with the GGUF magic bytes")
        raw_version = f.read(4)
        if len(raw_version) != 4:
            raise GGUFError("the header is truncated")
        version = struct.unpack("<I", raw_version)[0]
        endian = "<"
        if version & 0xFFFF == 0:  # a big-endian file reads as a huge little-endian number
            version, endian = struct.unpack(">I", raw_version)[0], ">"
        if version not in (2, 3):
            raise GGUFError(f"GGUF version {version} is not supported (only 2 and 3)")
        cur = _Cursor(f, file_size, endian)
        cur.base = 8
        tensor_count = cur.unpack("Q")
        kv_count = cur.unpack("Q")
        if tensor_count > file_size or kv_count > file_size:
            raise GGUFError("the header's counts are larger than the file")
        values: dict[str, Any] = {}
        for _ in range(kv_count):
            key = cur.string()
            vtype = cur.unpack("I")
            value = _value(cur, vtype)
            if value is not None:
                values[key] = value
        parameters = 0
        vocab_size: int | None = None
        layer_bytes: dict[int, int] = {}
        weight_types: dict[int, int] = {}
        data_end = 0  # bytes the tensor data needs after its (aligned) start
        for _ in range(tensor_count):
            tensor_name = cur.string()
            n_dims = cur.unpack("I")
            if n_dims > 8:
                raise GGUFError(f"a tensor has {n_dims} dimensions at byte {cur.offset()}")
            dims = [cur.unpack("Q") for _ in range(n_dims)]
            elements = 1
            for dim in dims:
                elements *= dim
            if tensor_name == "token_embd.weight" and n_dims == 2:
                vocab_size = dims[1]
            ttype = cur.unpack("I")
            offset = cur.unpack("Q")
            parameters += elements
            if ttype in GGML_QUANT_SIZES:
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
                data_end = max(data_end, offset + elements // block * size)
                layer = _layer_of(tensor_name)
                if layer is not None:
                    layer_bytes[layer] = layer_bytes.get(layer, 0) + elements // block * size
            if n_dims >= 2 and ttype in GGML_QUANT_SIZES:
                weight_types[ttype] = weight_types.get(ttype, 0) + elements
        # A copy cut short keeps a perfect header: check that the file holds every tensor.
        alignment = values.get("general.alignment", 32)
        alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
        data_start = -(-cur.offset() // alignment) * alignment
        if tensor_count and data_start + data_end > file_size:
            raise GGUFTruncated(
                f"the file is shorter than its tensors need: they need {data_start + data_end:,}"
                f" bytes but it has {file_size:,} (an unfinished download or a cut copy)"
            )
    meta = _summarise(path, version, tensor_count, values, parameters, weight_types)
    meta.vocab_size = vocab_size
    meta.layer_bytes = layer_bytes
    meta.tensor_elements = parameters
    return meta


def read_model_meta(path: Path) -> GGUFMeta:
    """The header of the model whose (first) file is `path`, with the tensors of every part
    of a split model counted: llama.cpp's gguf-split writes `split.count` parts
    (`…-00001-of-00003.gguf` and the rest, loaded together), each header listing only its own
    tensors, so part 1's alone left the later layers' weights out of the memory estimate
    (their bytes counted neither on the GPU nor in the layers fitted to it).
    FileNotFoundError when a part is gone (as llama.cpp's load would fail)."""
    meta = read_gguf_meta(path)
    count = meta.values.get("split.count")
    if not isinstance(count, int) or count <= 1 or meta.values.get("split.no", 0) != 0:
        return meta
    parts = part_paths(path)
    if len(parts) != count:  # not named as llama.cpp finds the parts: it loads part 1 alone
        return meta
    for part in parts[1:]:
        other = read_gguf_meta(part)
        for layer, size in other.layer_bytes.items():
            meta.layer_bytes[layer] = meta.layer_bytes.get(layer, 0) + size
        meta.tensor_elements += other.tensor_elements
        meta.tensor_count += other.tensor_count
        meta.vocab_size = meta.vocab_size or other.vocab_size
    return meta


def _layer_of(tensor_name: str) -> int | None:
    """`blk.12.attn_q.weight` → 12; None for tensors outside the repeated layers."""
    if not tensor_name.startswith("blk."):
        return None
    number = tensor_name[4:].split(".", 1)[0]
    return int(number) if number.isdigit() else None


def _summarise(
    path: Path,
    version: int,
    tensor_count: int,
    values: dict[str, Any],
    parameters: int,
    weight_types: dict[int, int],
) -> GGUFMeta:
    arch = values.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    declared = values.get("general.parameter_count")
    context = values.get(f"{arch}.context_length") if arch else None
    template = values.get("tokenizer.chat_template")
    name = values.get("general.name")
    quant = (
        _quant_from_file_type(values.get("general.file_type"))
        or quant_from_filename(path.name)
        or _quant_from_tensors(weight_types)
    )
    return GGUFMeta(
        version=version,
        tensor_count=tensor_count,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        parameters=declared if isinstance(declared, int) and declared > 0 else parameters or None,
        quantization=quant,
        context_length=context if isinstance(context, int) else None,
        chat_template=template if isinstance(template, str) else None,
        values=values,
    )
