"""The server's secrets: TLS files and the control RPCs' bearer token, read and checked at start-up.

`python -m server` loads them before vLLM is imported (a missing or unreadable file exits with
code 2 in a fraction of a second) and again from what vLLM's parser read, for the server itself.
Nothing here prints a secret: messages name files and variables, never their contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from server.core.bearer_token import BearerToken, InvalidToken
from server.options import AUTH_TOKEN_ENV, ServerOptions

PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
PEM_PRIVATE_KEY = b"PRIVATE KEY-----"


class CredentialsError(ValueError):
    pass


@dataclass(frozen=True)
class TlsMaterial:
    certificate_chain: bytes
    private_key: bytes
    # Present: clients must show a certificate signed by one of these CAs (mutual TLS).
    client_ca: bytes | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )

    def __repr__(self) -> str:
        return f"TlsMaterial(mutual={self.client_ca is not None})"


@dataclass(frozen=True)
class ServerCredentials:
    tls: TlsMaterial | None
    auth_token: BearerToken | None

    def summary(self) -> str:
        """What a client needs, for the start-up log (no secret in it)."""
        transport = "plaintext" if self.tls is None else "mutual TLS" if self.tls.client_ca is not None else "TLS"
        control = "open (no auth token configured)" if self.auth_token is None else "need the bearer token"
        return f"{transport}; control RPCs {control}"


def load_credentials(options: ServerOptions, environ: Mapping[str, str]) -> ServerCredentials:
    return ServerCredentials(tls=_load_tls(options), auth_token=_load_auth_token(options.auth_token_file, environ))


def _load_tls(options: ServerOptions) -> TlsMaterial | None:
    if options.tls_cert_file is None and options.tls_key_file is None:
        if options.tls_client_ca_file is not None:
            raise CredentialsError(
                "--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked over TLS"
            )
        return None
    if options.tls_cert_file is None or options.tls_key_file is None:
        raise CredentialsError("--tls-cert and --tls-key go together: give both or neither")
    client_ca = None
    if options.tls_client_ca_file is not None:
        client_ca = _read_pem("--tls-client-ca", options.tls_client_ca_file, PEM_CERTIFICATE)
    return TlsMaterial(
        certificate_chain=_read_pem("--tls-cert", options.tls_cert_file, PEM_CERTIFICATE),
        private_key=_read_pem("--tls-key", options.tls_key_file, PEM_PRIVATE_KEY),
        client_ca=client_ca,
    )


def _read_pem(flag: str, path: str, marker: bytes) -> bytes:
    content = _read(flag, path)
    # gRPC would only fail at the first handshake, with a message that names no file.
    if marker not in content:
        raise CredentialsError(f"{flag} {path}: not a PEM file holding {marker.decode().strip('-')}")
    return content


def _load_auth_token(path: str | None, environ: Mapping[str, str]) -> BearerToken | None:
    from_environment = environ.get(AUTH_TOKEN_ENV)
    if path is not None and from_environment is not None:
        raise CredentialsError(f"both --auth-token-file and {AUTH_TOKEN_ENV} are set: give the token one way")
    if path is not None:
        source, token = f"--auth-token-file {path}", _read("--auth-token-file", path).decode("utf-8", "replace").strip()
    elif from_environment is not None:
        # Set but empty is refused rather than read as "no token": that is how a failed lookup looks.
        source, token = AUTH_TOKEN_ENV, from_environment.strip()
    else:
        return None
    try:
        return BearerToken(token)
    except InvalidToken as error:
        raise CredentialsError(f"{source}: {error}") from None


def _read(flag: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise CredentialsError(f"{flag} {path}: cannot read it ({error.strerror or error})") from None
