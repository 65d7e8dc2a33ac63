"""Active request ids: unique while active, free again afterwards, drainable."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from server.core.errors import ServiceError
from server.core.request_registry import RequestRegistry


def test_an_id_is_unique_while_active_and_free_afterwards() -> None:
    async def scenario() -> None:
        registry = RequestRegistry()
        with registry.track("a") as entry:
            assert registry.get("a") is entry and len(registry) == 1
            with pytest.raises(ServiceError) as caught, registry.track("a"):
                pass
            assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS
        assert registry.get("a") is None and len(registry) == 0
        with registry.track("a"):
            pass

    asyncio.run(scenario())


def test_waiting_for_the_registry_to_drain() -> None:
    async def scenario() -> tuple[bool, bool]:
        registry = RequestRegistry()
        with registry.track("x"):
            timed_out = await registry.wait_until_empty(0.05)
        drained = await registry.wait_until_empty(0.05)
        return timed_out, drained

    assert asyncio.run(scenario()) == (False, True)
