"""Model folders, digests and GGUF metadata.

Import the submodules themselves (`core.models.registry`, `core.models.info`…): this file
re-exports nothing, so that a light module (the header reader, the memory plan) does not
pull the registry and its scanning in with it (every CLI command imports some of them).
"""
