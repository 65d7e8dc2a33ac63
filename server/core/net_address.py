"""How the server writes a listening address: `host:port`, an IPv6 host in brackets."""

from __future__ import annotations


def listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
