"""grpc.health.v1.Health: grpc's asyncio servicer, plus the List method reflection advertises."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio


class HealthService(health_aio.HealthServicer):
    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        """Every service this server reports a status for ("" is the server as a whole)."""
        response = health_pb2.HealthListResponse()
        for service, status in self._server_status.items():
            response.statuses[service].status = status
        return response
