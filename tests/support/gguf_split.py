"""Split a GGUF model into parts as llama.cpp's `gguf-split` does (`NAME-00001-of-00003.gguf`,
with the `split.*` keys llama.cpp reads), written with the `gguf` package (gguf-split itself
is not in the llama-cpp-python wheel)."""

from __future__ import annotations

import math
from pathlib import Path

import gguf


def split_gguf(src: Path, dst: Path, parts: int = 3) -> list[Path]:
    """Write `src` as `parts` files named after `dst` (`dst.stem-0000i-of-0000n.gguf`)."""
    reader = gguf.GGUFReader(src)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    per_part = math.ceil(len(reader.tensors) / parts)
    writer = gguf.GGUFWriter(dst, arch, split_max_tensors=per_part)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        # Quantized data comes as bytes; the writer turns its byte shape back into elements.
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    files = writer.format_shard_names(dst)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert len(files) == parts, files
    return files
