"""The tools and output-format fields of both APIs, normalised to the shared request keys
(implemented in core/tools/fields.py; this is the name the request parsers import)."""

from __future__ import annotations

from lmsp_desktop.core.tools.fields import CHAT, RESPONSES, TEXT_FORMAT, parse_tool_fields

__all__ = ["CHAT", "RESPONSES", "TEXT_FORMAT", "parse_tool_fields"]
