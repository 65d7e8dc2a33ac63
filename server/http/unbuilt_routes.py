"""The deployed node's endpoints this server does not build, answered as the API node reads their absence (spec
section 1): the model cache (`/api/v1/models/*`: this server serves the one model it started with) and `/embed`
with 404, "not implemented"; `/encrypted/identity` with 503, "disabled"."""

from __future__ import annotations

from fastapi import APIRouter

from server.http.errors import HttpError

# (method, path) the API node calls on the model cache (its models.go).
MODEL_CACHE_ROUTES = (
    ("POST", "/api/v1/models/status"),
    ("POST", "/api/v1/models/download"),
    ("DELETE", "/api/v1/models"),
    ("GET", "/api/v1/models/list"),
    ("GET", "/api/v1/models/space"),
)


def unbuilt_router() -> APIRouter:
    router = APIRouter()

    async def no_model_cache() -> None:
        raise HttpError(
            404,
            "NOT_IMPLEMENTED",
            "this server has no model cache: it serves the one model it was started with (--model)",
        )

    for method, path in MODEL_CACHE_ROUTES:
        router.add_api_route(path, no_model_cache, methods=[method])

    @router.post("/api/v1/embed")
    async def embed() -> None:
        raise HttpError(404, "NOT_IMPLEMENTED", "this server computes no embeddings")

    @router.get("/api/v1/encrypted/identity")
    async def identity() -> None:
        raise HttpError(503, "ENCRYPTION_DISABLED", "encrypted inference is disabled on this server")

    return router
