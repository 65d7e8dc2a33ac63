"""The server's TLS files and auth token, read at start-up: pairings, unreadable files, token sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.credentials import CredentialsError, load_credentials
from server.options import ServerOptions, parse_server_flags
from tests.support.certificates import CertificateFiles, make_certificates

TOKEN = "tok-123_ABC"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def options(*argv: object) -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags("python -m server", [str(arg) for arg in argv]))


def test_nothing_configured_is_plaintext_without_a_token() -> None:
    loaded = load_credentials(options(), {})
    assert loaded.tls is None and loaded.auth_token is None
    assert loaded.summary() == "plaintext; control RPCs open (no auth token configured)"


def test_tls_and_mutual_tls(certificates: CertificateFiles) -> None:
    tls = load_credentials(options("--tls-cert", certificates.server_cert, "--tls-key", certificates.server_key), {})
    assert tls.tls.certificate_chain == certificates.server_cert.read_bytes() and tls.tls.client_ca is None
    mutual = load_credentials(
        options(
            "--tls-cert",
            certificates.server_cert,
            "--tls-key",
            certificates.server_key,
            "--tls-client-ca",
            certificates.ca,
        ),
        {"MLNODE_AUTH_TOKEN": TOKEN},
    )
    assert mutual.tls.client_ca == certificates.ca.read_bytes()
    assert mutual.summary() == "mutual TLS; control RPCs need the bearer token"
    # Neither the key nor the token shows in a printed configuration.
    assert "PRIVATE" not in repr(mutual) and TOKEN not in repr(mutual)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--tls-cert", "{server_cert}"), "--tls-cert and --tls-key go together"),
        (("--tls-key", "{server_key}"), "--tls-cert and --tls-key go together"),
        (("--tls-client-ca", "{ca}"), "--tls-client-ca needs --tls-cert and --tls-key"),
        (
            ("--tls-cert", "/no/such.pem", "--tls-key", "{server_key}"),
            "--tls-cert /no/such.pem: cannot read it (No such file or directory)",
        ),
        (("--tls-cert", "{server_key}", "--tls-key", "{server_key}"), "not a PEM file holding BEGIN CERTIFICATE"),
        (("--tls-cert", "{server_cert}", "--tls-key", "{server_cert}"), "not a PEM file holding PRIVATE KEY"),
        (
            ("--tls-cert", "{server_cert}", "--tls-key", "{server_key}", "--tls-client-ca", "{server_key}"),
            "--tls-client-ca",
        ),
    ],
)
def test_tls_mistakes_are_refused_with_the_flag_named(
    certificates: CertificateFiles, flags: tuple[str, ...], message: str
) -> None:
    paths = {name: str(path) for name, path in vars(certificates).items()}
    with pytest.raises(CredentialsError) as refused:
        load_credentials(options(*(flag.format(**paths) for flag in flags)), {})
    assert message in str(refused.value)


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    from_file = load_credentials(options("--auth-token-file", token_file), {}).auth_token
    from_environment = load_credentials(options(), {"MLNODE_AUTH_TOKEN": TOKEN}).auth_token
    assert from_file.matches(TOKEN) and from_environment.matches(TOKEN)


@pytest.mark.parametrize(
    ("file_content", "environment", "message"),
    [
        ("", {}, "--auth-token-file {path}: the token is empty"),
        (" \n", {}, "the token is empty"),
        ("two words", {}, "only visible ASCII"),
        (TOKEN, {"MLNODE_AUTH_TOKEN": TOKEN}, "both --auth-token-file and MLNODE_AUTH_TOKEN are set"),
        # Set but empty: how a failed lookup looks, so not taken for "no token".
        (None, {"MLNODE_AUTH_TOKEN": ""}, "MLNODE_AUTH_TOKEN: the token is empty"),
    ],
)
def test_token_mistakes_are_refused_without_repeating_the_token(
    tmp_path: Path, file_content: str | None, environment: dict[str, str], message: str
) -> None:
    path = tmp_path / "token"
    flags = ()
    if file_content is not None:
        path.write_text(file_content)
        flags = ("--auth-token-file", path)
    with pytest.raises(CredentialsError) as refused:
        load_credentials(options(*flags), environment)
    assert message.format(path=path) in str(refused.value)
    assert "two words" not in str(refused.value) and TOKEN not in str(refused.value)


def test_an_unreadable_token_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError) as refused:
        load_credentials(options("--auth-token-file", tmp_path / "absent"), {})
    assert f"--auth-token-file {tmp_path / 'absent'}: cannot read it (No such file or directory)" == str(refused.value)
