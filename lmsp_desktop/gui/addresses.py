"""Addresses people can use: never `0.0.0.0`. This machine's clients use the loopback URL;
other devices use this machine's address on the network (when the service listens there)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from lmsp_desktop.gui.format import is_loopback

EVERY_INTERFACE = ("0.0.0.0", "::", "")


def local_url(url: str) -> str:
    """The service URL as this machine reaches it: a service bound to every interface
    (`http://0.0.0.0:5677`) is `http://127.0.0.1:5677` here; others are as they are."""
    parts = urlsplit(url)
    if not url or parts.hostname not in EVERY_INTERFACE:
        return url
    loopback = "[::1]" if parts.hostname == "::" else "127.0.0.1"
    return f"{parts.scheme}://{loopback}:{parts.port}" if parts.port else f"http://{loopback}"


def lan_address() -> str | None:
    """This machine's address on its local network (no packet is sent), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def reachable_url(url: str, host: str) -> str | None:
    """The service URL as other devices reach it: the bound address, or the LAN address
    when bound to every interface; None while it listens on loopback only."""
    if is_loopback(host):
        return None
    port = urlsplit(url).port
    address = lan_address() if host in EVERY_INTERFACE else host
    if address is None or port is None:
        return None
    shown = f"[{address}]" if ":" in address else address
    return f"http://{shown}:{port}"
