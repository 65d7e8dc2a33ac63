"""The bodies of `pow/init/generate` and `pow/generate` (spec sections 1.1 and 1.2, the API node's Go structs
PoCInitGenerateRequestV2 and PoCGenerateRequestV2), and of their answers. Types are strict (a number in quotes is
refused) and integers are bounded to their protobuf field's width, so that every body that passes here becomes a
gRPC request the PocService and ValidationService checks read (server.http.pow_requests). `params` forbids
unknown fields, as the deployed node's does (which is why `poc_stronger_rng` sits at the top level); other unknown
fields are ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pydantic

INT32 = Annotated[int, pydantic.Field(ge=-(2**31), le=2**31 - 1)]
INT64 = Annotated[int, pydantic.Field(ge=-(2**63), le=2**63 - 1)]
STRICT = pydantic.ConfigDict(strict=True)


class PocParamsBody(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    model: str
    seq_len: INT32
    # The API node omits it: the network's k (12) is the default (server.poc.batches.round_params).
    k_dim: INT32 | None = None


class InitGenerateBody(pydantic.BaseModel):
    model_config = STRICT

    block_hash: str
    block_height: INT64
    public_key: str
    # The node's NodeNum and the participant's node count (curMaxNodesNum + 1).
    node_id: INT32
    node_count: INT32
    params: PocParamsBody
    # The API node's callback base: artifacts go to {url}/generated. Absent or empty: the pull stream takes them.
    url: str = ""
    poc_stronger_rng: bool = False
    # The API node omits it (the deployed node defaults it to 32, as server.poc.batches.round_params does).
    batch_size: INT32 | None = None


class ArtifactBody(pydantic.BaseModel):
    model_config = STRICT

    nonce: INT64
    vector_b64: str


class ValidationBody(pydantic.BaseModel):
    model_config = STRICT

    artifacts: list[ArtifactBody]


class StatTestBody(pydantic.BaseModel):
    """The API node omits a zero field (omitempty): a field left out here is refused where it is needed."""

    model_config = STRICT

    dist_threshold: float | None = None
    p_mismatch: float | None = None
    p_value_threshold: float | None = None


class GenerateBody(InitGenerateBody):
    nonces: list[INT64]
    validation: ValidationBody | None = None
    stat_test: StatTestBody | None = None
    # The API node omits it (the job is queued and answered at once); true asks for the result in the answer.
    wait: bool = False


class BackendResult(pydantic.BaseModel):
    port: int
    status: str


class BackendError(pydantic.BaseModel):
    port: int
    error: str


class InitGenerateResponse(pydantic.BaseModel):
    """One "backend" per engine instance, named by the management port (the deployed node names its vLLM ports)."""

    status: str
    backends: int
    n_groups: int
    results: list[BackendResult]
    errors: list[BackendError] | None = None


class GenerateQueued(pydantic.BaseModel):
    status: str = "queued"
    # "{port}:{uuid}", as the deployed node rewrites its backends' ids.
    request_id: str
    queued_count: int


class BackendStatus(pydantic.BaseModel):
    port: int
    # The engine instance behind it (the deployed node has one vLLM port per backend; here they share one port).
    instance: int
    status: str


class PowStatusResponse(pydantic.BaseModel):
    status: str
    backends: list[BackendStatus]


class PowStopResponse(pydantic.BaseModel):
    status: str = "OK"
    results: list[BackendResult] | None = None
    errors: list[BackendError] | None = None
    # Only with no backend to stop (the deployed answer's wording).
    message: str | None = None


class GenerateJobError(pydantic.BaseModel):
    """Why a job failed, as the gRPC services name it (`type`: the ErrorReason)."""

    type: str
    message: str
    param: str | None = None


class GenerateJobResponse(pydantic.BaseModel):
    """`GET generate/{request_id}`: the job's status and, once it completed, its result (a validation job's the
    `/validated` body, another job's `{artifacts[{nonce, vector_b64}], not_computable}`)."""

    request_id: str
    status: str
    result: Mapping[str, Any] | None = None  # the same schema and JSON as a dict's
    error: GenerateJobError | None = None
