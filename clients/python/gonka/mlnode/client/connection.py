"""How a client reaches the server: plaintext or TLS (mutual TLS with a client certificate), and the
bearer token that control RPCs need when the server is configured with one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

# The variable the server reads its token from, read here too so one setting serves both ends.
AUTH_TOKEN_ENV = "MLNODE_AUTH_TOKEN"
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)

Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TlsConfig:
    """TLS towards the server. PEM bytes; `from_files` reads them.

    root_certificates: the CA that signed the server's certificate (None: the system's roots).
    certificate_chain and private_key: this client's certificate, for servers that require one
    (mutual TLS). server_name: the name the server's certificate must carry, when it differs from
    the target's host (an IP address, a tunnel).
    """

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("a client certificate needs its private key, and a key its certificate")

    @classmethod
    def from_files(
        cls, ca: str | None = None, cert: str | None = None, key: str | None = None, server_name: str | None = None
    ) -> TlsConfig:
        return cls(_read(ca), _read(cert), _read(key), server_name)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.root_certificates, self.private_key, self.certificate_chain)

    def channel_options(self) -> tuple[tuple[str, Any], ...]:
        return (("grpc.ssl_target_name_override", self.server_name),) if self.server_name else ()


def auth_token_from(path: str | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token in file `path` (surrounding whitespace dropped), else $MLNODE_AUTH_TOKEN, else None."""
    if path is not None:
        return Path(path).read_text().strip()
    return environ.get(AUTH_TOKEN_ENV) or None


def auth_metadata(token: str | None) -> Metadata | None:
    """The metadata that carries `token` on every call (None: no token, nothing added)."""
    return (("authorization", f"Bearer {token}"),) if token else None


def channel_arguments(tls: TlsConfig | None) -> tuple[tuple[str, Any], ...]:
    return CHANNEL_OPTIONS + (tls.channel_options() if tls else ())


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()
