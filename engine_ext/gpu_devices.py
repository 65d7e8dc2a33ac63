"""The host's NVIDIA GPUs as NVML reports them (the API node's `/api/v1/gpu/devices` and `/gpu/driver`, spec
section 1), through the NVML binding vLLM ships (vllm.third_party.pynvml: on every vLLM install, no dependency of
its own). Where NVML cannot start (no NVIDIA driver: a CPU host) every read raises NvmlUnavailable.

NVML lists every GPU of the host, as the deployed node's reads do, whatever CUDA_VISIBLE_DEVICES says. Each call
opens and closes NVML (nvmlInit counts references), so nothing stays open between the API node's reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    total_memory_mb: int
    free_memory_mb: int
    used_memory_mb: int
    utilization_percent: int | None
    temperature_c: int | None
    # False when NVML could not read the device (error_message says why).
    is_available: bool
    error_message: str | None


@dataclass(frozen=True)
class GpuDriver:
    driver_version: str
    # "12.4": CUDA's own MAJOR.MINOR of the version NVML reports as 12040.
    cuda_driver_version: str
    nvml_version: str


def default_nvml() -> ModuleType:
    from vllm.third_party import pynvml

    return pynvml


def read_gpu_devices(nvml: ModuleType | None = None) -> list[GpuDevice]:
    nvml = nvml or default_nvml()
    with _nvml_open(nvml):
        return [_device(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]


def read_gpu_driver(nvml: ModuleType | None = None) -> GpuDriver:
    nvml = nvml or default_nvml()
    with _nvml_open(nvml):
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
        return GpuDriver(
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            nvml_version=_text(nvml.nvmlSystemGetNVMLVersion()),
        )


@contextlib.contextmanager
def _nvml_open(nvml: ModuleType) -> Iterator[None]:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML cannot start on this host (no NVIDIA driver?): {error}") from error
    try:
        yield
    finally:
        nvml.nvmlShutdown()


def _device(nvml: ModuleType, index: int) -> GpuDevice:
    name = ""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
        temperature = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
    except nvml.NVMLError as error:
        return GpuDevice(index, name, 0, 0, 0, None, None, is_available=False, error_message=str(error))
    return GpuDevice(
        index,
        name,
        total_memory_mb=memory.total // MIB,
        free_memory_mb=memory.free // MIB,
        used_memory_mb=memory.used // MIB,
        utilization_percent=int(utilization),
        temperature_c=int(temperature),
        is_available=True,
        error_message=None,
    )


def _text(value: Any) -> str:
    # The binding answers bytes or str, by release.
    return value.decode() if isinstance(value, bytes) else str(value)
