"""The Python client's connection settings: TLS files, the token's sources, the metadata that carries it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gonka.mlnode.client import InferenceClient, TlsConfig, auth_token_from
from gonka.mlnode.client.connection import auth_metadata, channel_arguments


def test_the_token_comes_from_a_file_before_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert auth_token_from(str(token_file), {"MLNODE_AUTH_TOKEN": "from-env"}) == "from-file"
    assert auth_token_from(None, {"MLNODE_AUTH_TOKEN": "from-env"}) == "from-env"
    assert auth_token_from(None, {}) is None and auth_token_from(None, {"MLNODE_AUTH_TOKEN": ""}) is None


def test_the_token_travels_as_bearer_metadata() -> None:
    assert auth_metadata("abc") == (("authorization", "Bearer abc"),)
    assert auth_metadata(None) is None


def test_tls_settings(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(b"CA")
    tls = TlsConfig.from_files(ca=str(tmp_path / "ca.pem"), server_name="node.example")
    assert tls.root_certificates == b"CA" and tls.certificate_chain is None
    assert ("grpc.ssl_target_name_override", "node.example") in channel_arguments(tls)
    assert all(name != "grpc.ssl_target_name_override" for name, _ in channel_arguments(None))
    with pytest.raises(ValueError, match="needs its private key"):
        TlsConfig(certificate_chain=b"CERT")
    assert "KEY" not in repr(TlsConfig(certificate_chain=b"CERT", private_key=b"KEY"))


def test_a_given_channel_and_tls_are_not_combined() -> None:
    with pytest.raises(TypeError, match="either a channel or tls"):
        InferenceClient(channel=object(), tls=TlsConfig())
