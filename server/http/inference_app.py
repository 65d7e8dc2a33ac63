"""The inference port's application (`--inference-port`): the OpenAI-style endpoints (server.http.inference_routes)
and `/health`, over the same objects as the gRPC InferenceService and the management API, with the management API's
error shape, body bound and `/{version}` prefix."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from server.http.body_limit import BodyLimit
from server.http.errors import install_error_handlers
from server.http.inference_routes import InferenceObjects, inference_router
from server.http.version_prefix import VersionPrefix


def inference_app(objects: InferenceObjects, max_body_bytes: int) -> FastAPI:
    app = FastAPI(title="gonka-mlnode inference port", strict_content_type=False, openapi_url=None)

    # The API node's broker reads 200 as healthy; the deployed port answers 503 with no backend serving, and a
    # STOPPED node has none.
    @app.get("/health")
    async def health() -> JSONResponse:
        healthy = objects.node.inference_healthy and objects.node.serves_inference
        return JSONResponse({}, status_code=200 if healthy else 503)

    app.include_router(inference_router(objects))
    install_error_handlers(app, objects.admission)
    paths = [route.path for route in app.routes if isinstance(route, APIRoute)]
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(VersionPrefix, paths=paths)
    return app
