"""What a callback URL must be: checked when a client gives one (INVALID_FIELD) and again before a stored
entry is sent (a store written by another version, or edited by hand, may hold anything)."""

from __future__ import annotations

from urllib.parse import urlsplit

import yarl

SCHEMES = ("http", "https")
# The URL is stored with every entry and written to the log with every failure.
MAX_URL_CHARS = 2048


def callback_url_problem(url: str) -> str | None:
    """Why `url` cannot take callback POSTs, or None when it can: http(s), a host, a port in 1..65535, no
    query or fragment (the server appends /generated or /validated to the path), no control character or
    whitespace (a newline would forge a log line), at most MAX_URL_CHARS characters."""
    if len(url) > MAX_URL_CHARS:
        return f"must be at most {MAX_URL_CHARS} characters, got {len(url)}"
    if any(not character.isprintable() or character.isspace() for character in url):
        return "must hold no control character or whitespace"
    try:
        parts = urlsplit(url)
        port = parts.port
        # aiohttp sends through yarl, which reads some URLs differently from urllib: both must accept it.
        parsed = yarl.URL(url)
    except ValueError as error:
        return f"is not a valid URL ({error})"
    if parts.scheme not in SCHEMES:
        return "must be an http:// or https:// URL"
    if not parts.hostname or not parsed.host:
        return "must name a host"
    if port == 0:
        return "must name a port from 1 to 65535"
    if parts.query or parts.fragment:
        return "must have no query or fragment (the server appends /generated or /validated to its path)"
    return None
