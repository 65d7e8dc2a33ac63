"""`/api/v1/gpu/devices` and `/api/v1/gpu/driver` (spec section 1, the API node's gpu.go): the host's GPUs from NVML
(engine_ext.gpu_devices), 404 where NVML cannot start (a host without an NVIDIA GPU), which the API node reads
as "not implemented". NVML's calls block for milliseconds: they run off the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TypeVar

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from engine_ext.gpu_devices import NvmlUnavailable, read_gpu_devices, read_gpu_driver
from server.http.errors import HttpError

T = TypeVar("T")


def gpu_router() -> APIRouter:
    router = APIRouter(prefix="/api/v1/gpu")

    @router.get("/devices")
    async def devices() -> JSONResponse:
        found = await _read(read_gpu_devices)
        return JSONResponse({"devices": [dataclasses.asdict(device) for device in found], "count": len(found)})

    @router.get("/driver")
    async def driver() -> JSONResponse:
        return JSONResponse(dataclasses.asdict(await _read(read_gpu_driver)))

    return router


async def _read(read: Callable[[], T]) -> T:
    try:
        return await asyncio.to_thread(read)
    except NvmlUnavailable as error:
        raise HttpError(404, "NO_GPU", str(error)) from None
