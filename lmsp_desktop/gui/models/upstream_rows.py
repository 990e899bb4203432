"""How a model served by an upstream shows in the models table: its upstream's state,
latency and model count where a local file shows its size, digest and folder."""

from __future__ import annotations

from lmsp_desktop.core.upstreams.catalog import UpstreamModelInfo


def upstream_cells(info: UpstreamModelInfo) -> dict[str, str]:
    """Cell text by column header."""
    latency = "" if info.latency_ms is None else f" · {info.latency_ms:.0f} ms"
    models = f"{info.model_count} model{'' if info.model_count == 1 else 's'}"
    status = (
        f"● {info.upstream} up{latency} · {models}" if info.reachable else f"✗ {info.upstream} down"
    )
    return {
        "Name": info.id,
        "Source": "Upstream",
        "Size": "remote",
        "Architecture": "—",
        "Quantization": "—",
        "Parameters": "—",
        "Context": f"{info.context_length:,}" if info.context_length else "—",
        "Digest": "—",
        "Status": status,
        # A blue dot alone said "loaded" even while the upstream was down: words instead.
        "Loaded": f"on {info.upstream}" if info.reachable else "✗ down",
        "Location": info.base_url,
    }


def upstream_tooltip(info: UpstreamModelInfo, header: str) -> str | None:
    if header == "Status":
        if info.reachable:
            return f"Runs on the upstream {info.upstream} ({info.base_url})."
        return (
            f"The upstream {info.upstream} does not answer: {info.upstream_error or 'unknown'}. "
            "Tasks for it are retried, then fail with upstream_unavailable."
        )
    if header in ("Name", "Location"):
        return info.base_url
    return None
