"""The management API's bodies, with the deployed field names (spec section 1; the API node's Go structs read
them). Unknown request fields are ignored, as the deployed node's models ignore them: the API node may send more
than this server reads."""

from __future__ import annotations

import pydantic


class InferenceUpRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)

    model: str
    # The engine's settings are this server's command line: these are read (and type-checked) but not applied.
    dtype: str = "auto"
    additional_args: list[str] = []


class StateResponse(pydantic.BaseModel):
    state: str
    version: str
    poc_validation_inference: bool
    poc_status: str
    inference_healthy: bool
    loaded_model: str


class VersionsResponse(pydantic.BaseModel):
    vllm_version: str
    poc_validation_inference: bool


class StatusOk(pydantic.BaseModel):
    status: str = "OK"
