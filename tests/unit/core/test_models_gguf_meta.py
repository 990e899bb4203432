"""The header-only GGUF reader against files written by the `gguf` package's GGUFWriter."""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from lmsp_desktop.core.models import gguf_meta
from lmsp_desktop.core.models.gguf_meta import GGUFError, quant_from_filename, read_gguf_meta

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    context_length: int | None = 2048,
    file_type: int | None = 3,
    name: str | None = "Tiny Test Model",
    chat_template: str | None = CHATML,
    vocab: int = 300,
    parameter_count: int | None = None,
    tensors: dict[str, tuple[int, ...]] | None = None,
    payload: bytes = b"",
) -> Path:
    """A small but real GGUF file; `payload` makes otherwise identical files differ."""
    writer = GGUFWriter(path, arch)
    if name is not None:
        writer.add_name(name)
    if context_length is not None:
        writer.add_context_length(context_length)
    if file_type is not None:
        writer.add_file_type(file_type)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    if parameter_count is not None:
        writer.add_uint64("general.parameter_count", parameter_count)
    writer.add_array("general.languages", ["en", "fr"])
    writer.add_token_list([f"tok{i}" for i in range(vocab)])
    writer.add_array("tokenizer.ggml.token_type", [1] * vocab)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    if payload:
        writer.add_string("test.payload", payload.hex())
    for tensor_name, shape in (tensors or {"blk.0.w": (4, 8), "norm": (8,)}).items():
        writer.add_tensor(tensor_name, np.ones(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_reads_the_values_the_models_panel_shows(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf", context_length=4096, file_type=3)
    meta = read_gguf_meta(path)
    assert meta.architecture == "llama"
    assert meta.name == "Tiny Test Model"
    assert meta.context_length == 4096
    assert meta.quantization == "Q4_1"
    assert meta.chat_template == CHATML
    assert meta.parameters == 4 * 8 + 8  # counted from the tensor shapes
    assert meta.tensor_count == 2
    assert meta.values["general.languages"] == ["en", "fr"]
    assert "tokenizer.ggml.tokens" not in meta.values  # large arrays are skipped, not kept


def test_declared_parameter_count_wins_over_tensor_shapes(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", parameter_count=135_000_000)
    assert read_gguf_meta(path).parameters == 135_000_000


@pytest.mark.parametrize(
    ("file_type", "filename", "expected"),
    [
        (0, "m.gguf", "F32"),
        (1, "m.gguf", "F16"),
        (15, "m.gguf", "Q4_K_M"),
        (None, "Llama-3-8B-Instruct-Q5_K_S.gguf", "Q5_K_S"),
        (None, "model.iq4_xs.gguf", "IQ4_XS"),
        (None, "plain.gguf", "F32"),  # last resort: the type of most weights
    ],
)
def test_quantization_from_file_type_then_name_then_tensors(
    tmp_path: Path, file_type: int | None, filename: str, expected: str
) -> None:
    path = write_gguf(tmp_path / filename, file_type=file_type)
    assert read_gguf_meta(path).quantization == expected


def test_quant_names_in_file_names() -> None:
    assert quant_from_filename("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quant_from_filename("gemma-3-270m-q4_k_m.gguf") == "Q4_K_M"
    assert quant_from_filename("phi-2.BF16.gguf") == "BF16"
    assert quant_from_filename("notes.gguf") is None


@pytest.mark.parametrize("read_size", [7, 64, 1000])
def test_buffer_refills_at_any_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_size: int
) -> None:
    # Refilling the read buffer mid-value must not change any value read.
    path = write_gguf(tmp_path / "m.gguf", vocab=2000)
    expected = read_gguf_meta(path)
    monkeypatch.setattr(gguf_meta, "READ_SIZE", read_size)
    assert read_gguf_meta(path) == expected


def test_agrees_with_the_gguf_package_reader(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", tensors={"a": (3, 5), "b": (7,), "c": (2, 2, 2)})
    ours = read_gguf_meta(path)
    reader = GGUFReader(path)
    theirs: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or (len(f.types) > 1 and len(f.data) > 64):
            continue
        theirs[key] = f.contents()
    assert ours.values == theirs  # float32 values chosen to be exact
    assert ours.parameters == sum(int(t.n_elements) for t in reader.tensors)
    assert ours.tensor_count == len(reader.tensors)


def test_not_a_gguf_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"PK\x03\x04 this is a zip file" * 10)
    with pytest.raises(GGUFError, match="magic"):
        read_gguf_meta(path)


def test_an_empty_file_is_called_empty(tmp_path: Path) -> None:
    """Not "does not start with the GGUF magic bytes": a reviewer's 0-byte .gguf."""
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match=r"^the file is empty \(0 bytes\)$"):
        read_gguf_meta(empty)


def test_truncated_header_is_refused(tmp_path: Path) -> None:
    full = write_gguf(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[:200])
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf_meta(cut)


def test_absurd_lengths_are_refused_without_allocating(tmp_path: Path) -> None:
    # A string claiming 2**62 bytes must be an error, not an attempt to read that much.
    path = tmp_path / "evil.gguf"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = struct.pack("<Q", 3) + b"abc" + struct.pack("<I", 8)
    path.write_bytes(header + key + struct.pack("<Q", 2**62) + b"x" * 100)
    with pytest.raises(GGUFError):
        read_gguf_meta(path)


def test_unsupported_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<III", 1, 0, 0) + b"\0" * 64)
    with pytest.raises(GGUFError, match="version 1"):
        read_gguf_meta(path)


def test_the_constants_load_where_gguf_is_no_folder_of_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packaged app keeps `gguf` in PyInstaller's archive: there is no constants.py to
    read on its own, and reading it failed every start of the bundle (FileNotFoundError at
    import). The plain import then gives the same enums."""
    import importlib.machinery

    import gguf.constants

    archive = importlib.machinery.ModuleSpec("gguf", None, is_package=True)
    archive.submodule_search_locations = [str(tmp_path / "PYZ" / "gguf")]  # not on disk
    monkeypatch.setattr(gguf_meta.importlib.util, "find_spec", lambda name: archive)
    monkeypatch.delitem(sys.modules, "lmsp_desktop._gguf_constants", raising=False)
    constants = gguf_meta._gguf_constants()
    assert constants.GGUFValueType.UINT32 == gguf.constants.GGUFValueType.UINT32
    assert constants.LlamaFileType.MOSTLY_Q4_1.name == "MOSTLY_Q4_1"
