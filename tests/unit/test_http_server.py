"""The management API's flags, and its listener on the server's own event loop: off unless --http-port is given,
the port checked before the engine loads, uvicorn serving in the loop without taking the server's signals, and
stopped with a grace for the requests in flight. (Against the real server: tests/e2e/test_http_management.py.)"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from fastapi import FastAPI

from server.http.http_server import ManagementServer
from server.http.options import DEFAULT_MLNODE_VERSION, FraudThreshold, HttpOptions, InferencePortOptions
from server.listen_port import PortUnavailable, require_port_free
from server.options import ServerOptions, parse_server_flags
from tests.support.server_process import REPO_ROOT


def options(*argv: str) -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags("python -m server", list(argv)))


def test_no_management_api_without_the_flag() -> None:
    assert options().http is None
    assert options("--mlnode-version", "3.0.14", "--fraud-threshold", "caller").http is None


def test_the_api_listens_on_the_servers_host_with_its_defaults() -> None:
    assert options("--host", "10.1.2.3", "--http-port", "8080").http == HttpOptions(
        "10.1.2.3", 8080, DEFAULT_MLNODE_VERSION, FraudThreshold.FLEET
    )
    given = options(
        "--host", "::1", "--http-port", "8080", "--mlnode-version", "v3.0.14-rc1", "--fraud-threshold", "caller"
    )
    assert given.http == HttpOptions("::1", 8080, "v3.0.14-rc1", FraudThreshold.CALLER)
    assert given.http.address == "[::1]:8080"
    assert DEFAULT_MLNODE_VERSION == "3.1.0"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--http-port", "0"),
        ("--http-port", "65536"),
        ("--http-port", "http"),
        ("--mlnode-version", "3.1"),
        ("--mlnode-version", "latest"),
        ("--fraud-threshold", "0.05"),
    ],
)
def test_bad_values_exit_2(flag: str, value: str) -> None:
    with pytest.raises(SystemExit) as refused:
        options(flag, value)
    assert refused.value.code == 2


def test_a_bound_http_port_or_one_of_the_servers_other_ports_is_refused_before_the_engine_loads() -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        taken = occupant.getsockname()[1]
        with pytest.raises(PortUnavailable, match=f"127.0.0.1:{taken} is already in use"):
            require_port_free(options("--port", "0", "--http-port", str(taken)))
    with pytest.raises(PortUnavailable, match="is the gRPC port"):
        require_port_free(options("--port", "9400", "--http-port", "9400"))
    with pytest.raises(PortUnavailable, match="is the metrics port"):
        require_port_free(options("--port", "0", "--metrics-port", "9401", "--http-port", "9401"))


def test_the_inference_port_is_off_unless_given_and_needs_no_management_port() -> None:
    assert options("--http-port", "8080").inference is None
    alone = options("--host", "::1", "--inference-port", "5050")
    assert (alone.inference, alone.http) == (InferencePortOptions("::1", 5050), None)
    assert alone.inference is not None and alone.inference.address == "[::1]:5050"


def test_the_inference_port_may_share_no_port_with_the_servers_others() -> None:
    for taken, name in (
        ("--port", "the gRPC port"),
        ("--metrics-port", "the metrics port"),
        ("--http-port", "the management port"),
    ):
        flags = ["--port", "9410", "--metrics-port", "9411", "--http-port", "9412"]
        port = flags[flags.index(taken) + 1]
        with pytest.raises(PortUnavailable, match=f"--inference-port {port} is {name}"):
            require_port_free(options(*flags, "--inference-port", port))


def test_the_flags_import_no_web_framework() -> None:
    # The CLI parses flags before anything heavy loads.
    code = "import sys, server.cli; sys.exit('fastapi' in sys.modules or 'uvicorn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False).returncode == 0


def slow_app(release: asyncio.Event) -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict:
        return {"pong": True}

    @app.get("/slow")
    async def slow() -> dict:
        await release.wait()
        return {"slow": True}

    return app


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def free_local_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_it_serves_in_the_loop_leaves_the_signals_alone_and_stops_after_the_request_in_flight() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        terms: list[str] = []
        loop.add_signal_handler(signal.SIGTERM, terms.append, "SIGTERM")
        try:
            release = asyncio.Event()
            port = free_local_port()
            server = ManagementServer(slow_app(release), HttpOptions("127.0.0.1", port), graceful_seconds=10)
            await server.start()
            assert await asyncio.to_thread(get, f"http://127.0.0.1:{port}/ping") == b'{"pong":true}'
            # The signal still reaches the loop's own handler (uvicorn installs none of its own).
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(0.05)
            assert terms == ["SIGTERM"]
            in_flight = asyncio.create_task(asyncio.to_thread(get, f"http://127.0.0.1:{port}/slow"))
            await asyncio.sleep(0.3)
            stopping = asyncio.create_task(server.stop())
            await asyncio.sleep(0.3)
            assert not stopping.done()
            release.set()
            assert await in_flight == b'{"slow":true}'
            await stopping
            with pytest.raises(OSError):
                await asyncio.to_thread(get, f"http://127.0.0.1:{port}/ping")
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    asyncio.run(scenario())


def test_an_address_in_use_is_an_oserror_not_an_exit() -> None:
    async def scenario() -> None:
        with socket.socket() as occupant:
            occupant.bind(("127.0.0.1", 0))
            occupant.listen()
            taken = occupant.getsockname()[1]
            server = ManagementServer(FastAPI(), HttpOptions("127.0.0.1", taken), graceful_seconds=1)
            with pytest.raises(OSError):
                await server.start()
            await server.stop()

    asyncio.run(scenario())
