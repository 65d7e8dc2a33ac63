"""`/api/v1/metrics` (spec section 1): the server's Prometheus registry (server.metrics: vLLM's engine metrics,
per-RPC and PoC metrics), in the exposition prometheus_client writes for the metrics port. On the event loop, as
the metrics port serves it (server.metrics.endpoint says why); a scrape takes milliseconds, well within the API
node's 5 s budget."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def metrics_router(registry: CollectorRegistry) -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/metrics")
    async def metrics(request: Request) -> Response:
        # The Prometheus text format, or OpenMetrics when the scraper asks for it.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return Response(content=encode(registry), headers={"Content-Type": content_type})

    return router
