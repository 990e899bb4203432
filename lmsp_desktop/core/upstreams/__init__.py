"""Upstream engines: OpenAI-compatible servers that generate for tasks stored here."""
