"""The management API's operational endpoints (server.http.metrics_routes, gpu_routes, unbuilt_routes) on the
server's own objects: the metrics registry as Prometheus text, the endpoints this server does not build answered as
the API node reads their absence, GPU information from NVML (a stand-in NVML module: this host has no GPU, and
vLLM's own binding is read where the host has one)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from engine_ext.gpu_devices import NvmlUnavailable, read_gpu_devices, read_gpu_driver
from tests.unit.test_http_management import error_of, node_of

MIB = 1024 * 1024


def test_metrics_serve_the_servers_registry_as_prometheus_text_under_the_version_prefix_too() -> None:
    registry = CollectorRegistry()
    Counter("mlnode_test_scrapes", "A counter of the test's.", registry=registry).inc(3)
    with node_of(metrics=registry) as node:
        for path in ("/api/v1/metrics", "/v3.0.8/api/v1/metrics"):
            response = node.client.get(path)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            families = {family.name: family for family in text_string_to_metric_families(response.text)}
            assert families["mlnode_test_scrapes"].samples[0].value == 3.0
        openmetrics = node.client.get("/api/v1/metrics", headers={"Accept": "application/openmetrics-text"})
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/models/status"),
        ("POST", "/api/v1/models/download"),
        ("DELETE", "/api/v1/models"),
        ("GET", "/api/v1/models/list"),
        ("GET", "/api/v1/models/space"),
        ("POST", "/api/v1/embed"),
    ],
)
def test_the_model_cache_and_embed_are_404_not_implemented(method: str, path: str) -> None:
    with node_of() as node:
        response = node.client.request(method, path, json={"hf_repo": "Qwen/Qwen3-0.6B", "text": "x"})
    assert response.status_code == 404
    assert error_of(response)["type"] == "NOT_IMPLEMENTED"


def test_the_encrypted_identity_is_503_disabled() -> None:
    with node_of() as node:
        response = node.client.get("/api/v1/encrypted/identity")
    assert response.status_code == 503
    assert error_of(response)["type"] == "ENCRYPTION_DISABLED"


class NvmlError(Exception):
    pass


def stand_in_nvml(devices: list[Any], starts: bool = True) -> Any:
    """NVML's calls as the binding makes them; a device given as None fails its reads."""

    def init() -> None:
        if not starts:
            raise NvmlError("NVML Shared Library Not Found")

    def handle(index: int) -> int:
        if devices[index] is None:
            raise NvmlError("GPU is lost")
        return index

    return types.SimpleNamespace(
        NVMLError=NvmlError,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: devices[h]["name"].encode(),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            total=devices[h]["total"], free=devices[h]["free"], used=devices[h]["total"] - devices[h]["free"]
        ),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=devices[h]["util"], memory=0),
        nvmlDeviceGetTemperature=lambda h, sensor: devices[h]["temp"],
        nvmlSystemGetDriverVersion=lambda: "570.86.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12080,
        nvmlSystemGetNVMLVersion=lambda: b"12.570.86.15",
    )


def test_gpu_devices_carry_the_api_nodes_fields_and_a_failing_device_says_why() -> None:
    h200 = {"name": "NVIDIA H200", "total": 143771 * MIB, "free": 143000 * MIB, "util": 7, "temp": 31}
    found = read_gpu_devices(stand_in_nvml([h200, None]))
    assert [vars(device) for device in found] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "total_memory_mb": 143771,
            "free_memory_mb": 143000,
            "used_memory_mb": 771,
            "utilization_percent": 7,
            "temperature_c": 31,
            "is_available": True,
            "error_message": None,
        },
        {
            "index": 1,
            "name": "",
            "total_memory_mb": 0,
            "free_memory_mb": 0,
            "used_memory_mb": 0,
            "utilization_percent": None,
            "temperature_c": None,
            "is_available": False,
            "error_message": "GPU is lost",
        },
    ]
    driver = read_gpu_driver(stand_in_nvml([]))
    assert vars(driver) == {
        "driver_version": "570.86.15",
        "cuda_driver_version": "12.8",
        "nvml_version": "12.570.86.15",
    }


def test_without_nvml_every_read_says_so_and_the_routes_answer_404() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML cannot start"):
        read_gpu_devices(stand_in_nvml([], starts=False))


def test_the_gpu_routes_answer_what_this_hosts_nvml_reads() -> None:
    """vLLM's NVML binding on this host: 404 without an NVIDIA driver (the development machine), the devices
    with one."""
    try:
        expected = len(read_gpu_devices())
    except NvmlUnavailable:
        expected = None
    with node_of() as node:
        devices, driver = node.client.get("/api/v1/gpu/devices"), node.client.get("/api/v1/gpu/driver")
    if expected is None:
        for response in (devices, driver):
            assert response.status_code == 404
            assert error_of(response)["type"] == "NO_GPU"
    else:
        assert devices.status_code == 200 and devices.json()["count"] == expected
        assert driver.status_code == 200 and set(driver.json()) == {
            "driver_version",
            "cuda_driver_version",
            "nvml_version",
        }
