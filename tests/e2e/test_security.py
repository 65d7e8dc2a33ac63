"""TLS, mutual TLS and the control RPCs' bearer token, against real servers (certificates made here).

Two servers, one after the other: mutual TLS with the token from a file, then TLS with the token
from MLNODE_AUTH_TOKEN. Both are driven through the Python client (blocking and asyncio), its CLI,
the Go client's example command and the real grpcurl binary. Refusals that come before vLLM is loaded need no server.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from gonka.mlnode.client import AsyncInferenceClient, InferenceClient, ServerError, TlsConfig
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.e2e.test_service_surface import grpcurl_binary
from tests.support.certificates import CertificateFiles, make_certificates
from tests.support.server_process import REPO_ROOT, SERVER_LAYER_FLAGS, ServerProcess, engine_environment, start_server

FILE_TOKEN = "file-token_0123456789abcdef"
ENV_TOKEN = "env-token_fedcba9876543210"
PROMPT = [9707, 1879, 11]
BEFORE_VLLM_IMPORT_SECONDS = 5


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return make_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(FILE_TOKEN + "\n")
    path.chmod(0o600)
    return path


def client_tls(
    certificates: CertificateFiles, with_certificate: bool = True, server_name: str | None = None
) -> TlsConfig:
    if with_certificate:
        return TlsConfig.from_files(
            str(certificates.ca), str(certificates.client_cert), str(certificates.client_key), server_name
        )
    return TlsConfig.from_files(str(certificates.ca), server_name=server_name)


def failure(call) -> tuple[str, str | None]:
    with pytest.raises(ServerError) as failed:
        call()
    return failed.value.code.name, failed.value.reason


def outcome(call) -> str:
    """ "OK", or the failed call's code name."""
    try:
        call()
    except ServerError as error:
        return error.code.name
    return "OK"


def run_cli(target: str, *args: str, env_token: str | None = None) -> subprocess.CompletedProcess:
    env = engine_environment()
    if env_token is not None:
        env["MLNODE_AUTH_TOKEN"] = env_token
    return subprocess.run(
        [sys.executable, "-m", "gonka.mlnode.client", "--target", target, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def grpcurl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([grpcurl_binary(), *args], capture_output=True, text=True, timeout=60, check=False)


def stop_cleanly(server: ServerProcess) -> None:
    exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code}:\n{server.log_tail()}"


# Class scope: each server lives for its class alone, so only one runs at a time.
@pytest.fixture(scope="class")
def mutual_tls_server(
    tmp_path_factory: pytest.TempPathFactory, model_dir: Path, certificates: CertificateFiles, token_file: Path
) -> Iterator[ServerProcess]:
    flags = [
        "--tls-cert",
        str(certificates.server_cert),
        "--tls-key",
        str(certificates.server_key),
        "--tls-client-ca",
        str(certificates.ca),
        "--auth-token-file",
        str(token_file),
        *SERVER_LAYER_FLAGS,
    ]
    readiness = client_tls(certificates).channel_credentials()
    process = start_server(tmp_path_factory.mktemp("mtls") / "server.log", flags, credentials=readiness)
    yield process
    stop_cleanly(process)


@pytest.fixture(scope="class")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, model_dir: Path, certificates: CertificateFiles
) -> Iterator[ServerProcess]:
    env = engine_environment()
    env["MLNODE_AUTH_TOKEN"] = ENV_TOKEN
    flags = [
        "--tls-cert",
        str(certificates.server_cert),
        "--tls-key",
        str(certificates.server_key),
        *SERVER_LAYER_FLAGS,
    ]
    readiness = client_tls(certificates, with_certificate=False).channel_credentials()
    process = start_server(tmp_path_factory.mktemp("tls") / "server.log", flags, env=env, credentials=readiness)
    yield process
    stop_cleanly(process)


class TestMutualTlsWithATokenFile:
    @pytest.fixture
    def server(self, mutual_tls_server: ServerProcess) -> ServerProcess:
        return mutual_tls_server

    def test_the_client_generates_and_reaches_the_control_rpcs_with_certificate_and_token(
        self, server, certificates
    ) -> None:
        with InferenceClient(server.target, tls=client_tls(certificates), auth_token=FILE_TOKEN) as client:
            result = client.generate(token_ids=PROMPT, max_tokens=4, temperature=0)
            assert len(result.first.token_ids) == 4
            assert client.server_status(include_engine_processes=True).engine_processes
            # Past authorization: the servicer itself answers that no such request is active.
            assert failure(lambda: client.abort("no-such-request")) == ("NOT_FOUND", "REQUEST_NOT_FOUND")
            verdicts = client.validate_inference([vpb.InferenceItem()])
            assert len(verdicts) == 1 and verdicts[0].HasField("error")  # an empty item, judged, not refused
            assert outcome(client.poc.round_status) != "UNAUTHENTICATED"  # let in, whatever the round's state

    def test_without_the_token_only_the_control_rpcs_are_refused(self, server, certificates) -> None:
        with InferenceClient(server.target, tls=client_tls(certificates)) as client:
            assert len(client.generate(token_ids=PROMPT, max_tokens=2).first.token_ids) == 2
            assert client.model_info().served_model_name == "qwen3-tiny-embedded"
            assert client.server_status().uptime_seconds > 0  # without engine processes: open
            assert client.health() == health_pb2.HealthCheckResponse.SERVING
            refused = ("UNAUTHENTICATED", "AUTH_TOKEN_REQUIRED")
            assert failure(lambda: client.server_status(include_engine_processes=True)) == refused
            assert failure(lambda: client.abort("no-such-request")) == refused
            assert failure(lambda: client.validate_inference([vpb.InferenceItem()])) == refused
            assert failure(client.poc.round_status) == refused

    def test_a_wrong_token_is_refused_and_never_repeated(self, server, certificates) -> None:
        with InferenceClient(server.target, tls=client_tls(certificates), auth_token="not-the-token") as client:
            with pytest.raises(ServerError) as failed:
                client.abort("no-such-request")
        assert (failed.value.code.name, failed.value.reason) == ("UNAUTHENTICATED", "AUTH_TOKEN_INVALID")
        assert "not-the-token" not in str(failed.value) and FILE_TOKEN not in str(failed.value)

    def test_the_asyncio_client_over_mutual_tls(self, server, certificates) -> None:
        async def scenario() -> tuple[int, int]:
            async with AsyncInferenceClient(
                server.target, tls=client_tls(certificates), auth_token=FILE_TOKEN
            ) as client:
                status = await client.server_status(include_engine_processes=True)
                generation = await client.generate(token_ids=PROMPT, max_tokens=3)
                return len(status.engine_processes), len(generation.first.token_ids)

        processes, tokens = asyncio.run(scenario())
        assert processes >= 2 and tokens == 3

    @pytest.mark.parametrize("who", ["no certificate", "a certificate from another CA", "plaintext"])
    def test_a_client_without_a_trusted_certificate_is_refused_at_the_handshake(
        self, server, certificates, who: str
    ) -> None:
        if who == "plaintext":
            client = InferenceClient(server.target)
        elif who == "no certificate":
            client = InferenceClient(server.target, tls=client_tls(certificates, with_certificate=False))
        else:
            stranger = TlsConfig.from_files(
                str(certificates.ca), str(certificates.stranger_cert), str(certificates.stranger_key)
            )
            client = InferenceClient(server.target, tls=stranger)
        with client:
            with pytest.raises(ServerError) as failed:
                client.model_info()
        assert failed.value.code == grpc.StatusCode.UNAVAILABLE

    def test_grpcurl_over_mutual_tls_with_the_token(self, server, certificates) -> None:
        tls = [
            "-cacert",
            str(certificates.ca),
            "-cert",
            str(certificates.client_cert),
            "-key",
            str(certificates.client_key),
        ]
        request = [
            "-d",
            '{"include_engine_processes": true}',
            server.target,
            "gonka.mlnode.v1.InferenceService/GetServerStatus",
        ]
        # Reflection and health stay open: no token needed to list or check.
        listed = grpcurl(*tls, server.target, "list")
        assert listed.returncode == 0, listed.stderr
        assert "gonka.mlnode.v1.ValidationService" in listed.stdout.split()
        health = grpcurl(*tls, server.target, "grpc.health.v1.Health/Check")
        assert health.returncode == 0 and json.loads(health.stdout)["status"] == "SERVING", health.stderr

        answered = grpcurl(*tls, "-H", f"authorization: Bearer {FILE_TOKEN}", *request)
        assert answered.returncode == 0, answered.stderr
        assert len(json.loads(answered.stdout)["engine_processes"]) >= 2, answered.stdout

        refused = grpcurl(*tls, *request)
        assert refused.returncode != 0 and "Code: Unauthenticated" in refused.stderr
        assert '"reason":"AUTH_TOKEN_REQUIRED"' in refused.stderr, refused.stderr

    def test_the_cli_client_takes_certificates_and_a_token_file(self, server, certificates, token_file) -> None:
        tls = [
            "--tls-ca",
            str(certificates.ca),
            "--tls-cert",
            str(certificates.client_cert),
            "--tls-key",
            str(certificates.client_key),
        ]
        answered = run_cli(server.target, *tls, "--auth-token-file", str(token_file), "status")
        assert answered.returncode == 0, answered.stderr
        assert "engine_processes" in answered.stdout
        refused = run_cli(server.target, *tls, "status")
        assert refused.returncode == 1
        assert "error: UNAUTHENTICATED AUTH_TOKEN_REQUIRED" in refused.stderr

    def test_the_go_client_over_mutual_tls_with_the_token(self, server, certificates, go_example) -> None:
        tls = [
            "--target",
            server.target,
            "--ca-file",
            str(certificates.ca),
            "--cert-file",
            str(certificates.client_cert),
            "--key-file",
            str(certificates.client_key),
        ]
        chat = run_go(go_example, "chat", *tls, "--prompt", "Hi", "--max-tokens", "3", "--json")
        assert chat.returncode == 0, chat.stderr
        assert len([line for line in chat.stdout.splitlines() if '"token_id"' in line or '"id"' in line]) >= 1, (
            chat.stdout
        )
        # A control RPC: past the token check (no round has run here), then refused without it.
        answered = run_go(go_example, "round", "status", *tls, token=FILE_TOKEN)
        assert "ROUND_NOT_FOUND" in answered.stdout + answered.stderr, answered.stderr
        refused = run_go(go_example, "round", "status", *tls)
        assert refused.returncode != 0 and "AUTH_TOKEN_REQUIRED" in refused.stdout + refused.stderr, refused.stderr
        stranger = [
            "--target",
            server.target,
            "--ca-file",
            str(certificates.ca),
            "--cert-file",
            str(certificates.stranger_cert),
            "--key-file",
            str(certificates.stranger_key),
        ]
        assert run_go(go_example, "chat", *stranger, "--prompt", "Hi", "--max-tokens", "3").returncode != 0

    def test_the_token_is_never_logged(self, server) -> None:
        # Runs after the refusals above, which the server logs (by reason, without what was sent).
        log = server.log_path.read_text(errors="replace")
        assert "refused /gonka.mlnode.v1.InferenceService/Abort: AUTH_TOKEN_INVALID" in log
        assert "refused GetServerStatus with include_engine_processes: AUTH_TOKEN_REQUIRED" in log
        assert "mutual TLS; control RPCs need the bearer token" in log
        assert FILE_TOKEN not in log and "not-the-token" not in log


class TestTlsWithATokenFromTheEnvironment:
    @pytest.fixture
    def server(self, tls_server: ServerProcess) -> ServerProcess:
        return tls_server

    def test_the_client_trusts_the_ca_without_a_certificate_of_its_own(self, server, certificates) -> None:
        with InferenceClient(
            server.target, tls=client_tls(certificates, with_certificate=False), auth_token=ENV_TOKEN
        ) as client:
            assert len(client.generate(token_ids=PROMPT, max_tokens=3).first.token_ids) == 3
            assert failure(lambda: client.abort("no-such-request")) == ("NOT_FOUND", "REQUEST_NOT_FOUND")
        with InferenceClient(server.target, tls=client_tls(certificates, with_certificate=False)) as client:
            assert failure(lambda: client.abort("no-such-request")) == ("UNAUTHENTICATED", "AUTH_TOKEN_REQUIRED")

    def test_the_server_name_is_checked(self, server, certificates) -> None:
        # 127.0.0.1 as the address, the certificate checked for the name given instead.
        with InferenceClient(server.target, tls=client_tls(certificates, False, server_name="localhost")) as client:
            assert client.model_info().vocab_size > 0
        with InferenceClient(server.target, tls=client_tls(certificates, False, server_name="other.example")) as client:
            assert failure(client.model_info)[0] == "UNAVAILABLE"

    def test_a_plaintext_client_cannot_talk_to_a_tls_server(self, server) -> None:
        with InferenceClient(server.target) as client:
            assert failure(client.model_info)[0] == "UNAVAILABLE"

    def test_the_go_client_over_tls_checks_the_server_name(self, server, certificates, go_example) -> None:
        tls = ["--target", server.target, "--ca-file", str(certificates.ca)]
        answered = run_go(go_example, "chat", *tls, "--server-name", "localhost", "--prompt", "Hi", "--max-tokens", "3")
        assert answered.returncode == 0, answered.stderr
        refused = run_go(
            go_example, "chat", *tls, "--server-name", "other.example", "--prompt", "Hi", "--max-tokens", "3"
        )
        assert refused.returncode != 0

    def test_the_cli_client_reads_the_token_from_the_environment(self, server, certificates) -> None:
        tls = ["--tls-ca", str(certificates.ca), "--tls-server-name", "localhost"]
        answered = run_cli(server.target, *tls, "status", env_token=ENV_TOKEN)
        assert answered.returncode == 0, answered.stderr
        assert "engine_processes" in answered.stdout
        refused = run_cli(server.target, *tls, "status", env_token="wrong")
        assert refused.returncode == 1 and "error: UNAUTHENTICATED AUTH_TOKEN_INVALID" in refused.stderr
        assert "TLS; control RPCs need the bearer token" in server.log_path.read_text()
        assert ENV_TOKEN not in server.log_path.read_text()


def run_go(binary: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {name: value for name, value in engine_environment().items() if name != "MLNODE_AUTH_TOKEN"}
    if token is not None:
        env["MLNODE_AUTH_TOKEN"] = token
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120, env=env)


def run_server(*flags: str, env_token: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    env = engine_environment()
    if env_token is not None:
        env["MLNODE_AUTH_TOKEN"] = env_token
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "server", "--port", "0", *flags],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return completed, time.monotonic() - started


@pytest.mark.parametrize(
    ("flags", "env_token", "message"),
    [
        (("--tls-cert", "{server_cert}"), None, "error: --tls-cert and --tls-key go together"),
        (("--tls-client-ca", "{ca}"), None, "error: --tls-client-ca needs --tls-cert and --tls-key"),
        (
            ("--tls-cert", "{server_cert}", "--tls-key", "/no/such.key"),
            None,
            "error: --tls-key /no/such.key: cannot read it",
        ),
        (("--auth-token-file", "/no/such/token"), None, "error: --auth-token-file /no/such/token: cannot read it"),
        ((), "", "error: MLNODE_AUTH_TOKEN: the token is empty"),
        (("--auth-token", "s3cret-on-the-command-line"), None, "--auth-token is refused"),
    ],
)
def test_bad_security_settings_are_refused_before_vllm_is_imported(certificates, flags, env_token, message) -> None:
    paths = {name: str(path) for name, path in vars(certificates).items()}
    completed, seconds = run_server(*(flag.format(**paths) for flag in flags), env_token=env_token)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert message in completed.stderr
    assert "s3cret-on-the-command-line" not in completed.stderr + completed.stdout
    assert seconds < BEFORE_VLLM_IMPORT_SECONDS


def test_a_token_flag_spelled_for_vllms_parser_is_refused_without_being_printed() -> None:
    # `--auth_token` passes the first look (exact names only) and reaches vLLM's parser, which
    # reads underscores as dashes: the refusal must hold there too, without echoing the value.
    completed, _ = run_server("--auth_token", "s3cret-on-the-command-line")
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "--auth-token is refused" in completed.stderr
    assert "s3cret-on-the-command-line" not in completed.stderr + completed.stdout
