"""Upstream engines: OpenAI-compatible servers that generate for tasks stored here."""

# Generations one upstream is sent at once unless its settings say otherwise.
DEFAULT_CONCURRENCY = 8
