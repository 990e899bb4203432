"""Model folders, digests and GGUF metadata."""
