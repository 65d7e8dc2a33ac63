from gonka.mlnode.v1 import inference_pb2 as _inference_pb2
from gonka.mlnode.v1 import poc_pb2 as _poc_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InferenceFailure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INFERENCE_FAILURE_UNSPECIFIED: _ClassVar[InferenceFailure]
    INFERENCE_FAILURE_SIMILARITY_BELOW_THRESHOLD: _ClassVar[InferenceFailure]
    INFERENCE_FAILURE_LENGTH_DIFFERS: _ClassVar[InferenceFailure]
    INFERENCE_FAILURE_TOKEN_DIFFERS: _ClassVar[InferenceFailure]
    INFERENCE_FAILURE_EMPTY_TOP_K: _ClassVar[InferenceFailure]
    INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE: _ClassVar[InferenceFailure]

class LogprobsModeSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOGPROBS_MODE_SOURCE_UNSPECIFIED: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_ITEM: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_REQUEST: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_REPLAY: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_PADDING: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_DEFAULT: _ClassVar[LogprobsModeSource]
    LOGPROBS_MODE_SOURCE_STRICTER: _ClassVar[LogprobsModeSource]
INFERENCE_FAILURE_UNSPECIFIED: InferenceFailure
INFERENCE_FAILURE_SIMILARITY_BELOW_THRESHOLD: InferenceFailure
INFERENCE_FAILURE_LENGTH_DIFFERS: InferenceFailure
INFERENCE_FAILURE_TOKEN_DIFFERS: InferenceFailure
INFERENCE_FAILURE_EMPTY_TOP_K: InferenceFailure
INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE: InferenceFailure
LOGPROBS_MODE_SOURCE_UNSPECIFIED: LogprobsModeSource
LOGPROBS_MODE_SOURCE_ITEM: LogprobsModeSource
LOGPROBS_MODE_SOURCE_REQUEST: LogprobsModeSource
LOGPROBS_MODE_SOURCE_REPLAY: LogprobsModeSource
LOGPROBS_MODE_SOURCE_PADDING: LogprobsModeSource
LOGPROBS_MODE_SOURCE_DEFAULT: LogprobsModeSource
LOGPROBS_MODE_SOURCE_STRICTER: LogprobsModeSource

class ValidateInferenceRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[InferenceItem]
    def __init__(self, items: _Optional[_Iterable[_Union[InferenceItem, _Mapping]]] = ...) -> None: ...

class InferenceItem(_message.Message):
    __slots__ = ("request", "positions", "mode", "threshold", "executor_could_not_serve")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_COULD_NOT_SERVE_FIELD_NUMBER: _ClassVar[int]
    request: _inference_pb2.GenerateRequest
    positions: ExecutorPositions
    mode: _inference_pb2.LogprobsMode
    threshold: float
    executor_could_not_serve: bool
    def __init__(self, request: _Optional[_Union[_inference_pb2.GenerateRequest, _Mapping]] = ..., positions: _Optional[_Union[ExecutorPositions, _Mapping]] = ..., mode: _Optional[_Union[_inference_pb2.LogprobsMode, str]] = ..., threshold: _Optional[float] = ..., executor_could_not_serve: bool = ...) -> None: ...

class ExecutorPositions(_message.Message):
    __slots__ = ("token_ids", "top_k", "top_ids", "top_logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    top_k: int
    top_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., top_k: _Optional[int] = ..., top_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class ValidateInferenceResponse(_message.Message):
    __slots__ = ("index", "verdict", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    verdict: InferenceVerdict
    error: ItemError
    def __init__(self, index: _Optional[int] = ..., verdict: _Optional[_Union[InferenceVerdict, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class InferenceVerdict(_message.Message):
    __slots__ = ("passed", "distance", "similarity", "failure", "first_differing_position", "executor_token_id", "replay_token_id", "top_ids_found", "mode", "mode_detected", "replayed_tokens", "mode_source", "modes_indistinguishable")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIFFERING_POSITION_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOP_IDS_FOUND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MODE_DETECTED_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODES_INDISTINGUISHABLE_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    distance: float
    similarity: float
    failure: InferenceFailure
    first_differing_position: int
    executor_token_id: int
    replay_token_id: int
    top_ids_found: float
    mode: _inference_pb2.LogprobsMode
    mode_detected: bool
    replayed_tokens: int
    mode_source: LogprobsModeSource
    modes_indistinguishable: bool
    def __init__(self, passed: bool = ..., distance: _Optional[float] = ..., similarity: _Optional[float] = ..., failure: _Optional[_Union[InferenceFailure, str]] = ..., first_differing_position: _Optional[int] = ..., executor_token_id: _Optional[int] = ..., replay_token_id: _Optional[int] = ..., top_ids_found: _Optional[float] = ..., mode: _Optional[_Union[_inference_pb2.LogprobsMode, str]] = ..., mode_detected: bool = ..., replayed_tokens: _Optional[int] = ..., mode_source: _Optional[_Union[LogprobsModeSource, str]] = ..., modes_indistinguishable: bool = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "reason", "field", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    reason: str
    field: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., reason: _Optional[str] = ..., field: _Optional[str] = ..., message: _Optional[str] = ..., retryable: bool = ...) -> None: ...

class PocStatTest(_message.Message):
    __slots__ = ("dist_threshold", "p_mismatch", "p_value_threshold")
    DIST_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    P_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    dist_threshold: float
    p_mismatch: float
    p_value_threshold: float
    def __init__(self, dist_threshold: _Optional[float] = ..., p_mismatch: _Optional[float] = ..., p_value_threshold: _Optional[float] = ...) -> None: ...

class ClaimedArtifact(_message.Message):
    __slots__ = ("nonce", "vector_b64", "vector_f16")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_B64_FIELD_NUMBER: _ClassVar[int]
    VECTOR_F16_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    vector_b64: str
    vector_f16: bytes
    def __init__(self, nonce: _Optional[int] = ..., vector_b64: _Optional[str] = ..., vector_f16: _Optional[bytes] = ...) -> None: ...

class ValidatePocArtifactsRequest(_message.Message):
    __slots__ = ("block_hash", "block_height", "public_key", "node_id", "params", "stronger_rng", "artifacts", "stat_test", "batch_size", "callback_url", "request_id")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STRONGER_RNG_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    STAT_TEST_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_URL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    block_hash: str
    block_height: int
    public_key: str
    node_id: int
    params: _poc_pb2.PocParams
    stronger_rng: bool
    artifacts: _containers.RepeatedCompositeFieldContainer[ClaimedArtifact]
    stat_test: PocStatTest
    batch_size: int
    callback_url: str
    request_id: str
    def __init__(self, block_hash: _Optional[str] = ..., block_height: _Optional[int] = ..., public_key: _Optional[str] = ..., node_id: _Optional[int] = ..., params: _Optional[_Union[_poc_pb2.PocParams, _Mapping]] = ..., stronger_rng: bool = ..., artifacts: _Optional[_Iterable[_Union[ClaimedArtifact, _Mapping]]] = ..., stat_test: _Optional[_Union[PocStatTest, _Mapping]] = ..., batch_size: _Optional[int] = ..., callback_url: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ValidatePocArtifactsResponse(_message.Message):
    __slots__ = ("progress", "summary")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    progress: PocValidationProgress
    summary: PocValidationSummary
    def __init__(self, progress: _Optional[_Union[PocValidationProgress, _Mapping]] = ..., summary: _Optional[_Union[PocValidationSummary, _Mapping]] = ...) -> None: ...

class PocValidationProgress(_message.Message):
    __slots__ = ("nonces", "distances", "mismatches", "nonces_checked", "mismatches_so_far", "computed")
    NONCES_FIELD_NUMBER: _ClassVar[int]
    DISTANCES_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    NONCES_CHECKED_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_SO_FAR_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_FIELD_NUMBER: _ClassVar[int]
    nonces: _containers.RepeatedScalarFieldContainer[int]
    distances: _containers.RepeatedScalarFieldContainer[float]
    mismatches: _containers.RepeatedScalarFieldContainer[bool]
    nonces_checked: int
    mismatches_so_far: int
    computed: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, nonces: _Optional[_Iterable[int]] = ..., distances: _Optional[_Iterable[float]] = ..., mismatches: _Optional[_Iterable[bool]] = ..., nonces_checked: _Optional[int] = ..., mismatches_so_far: _Optional[int] = ..., computed: _Optional[_Iterable[bool]] = ...) -> None: ...

class PocValidationSummary(_message.Message):
    __slots__ = ("n_total", "n_mismatch", "mismatch_nonces", "p_value", "fraud_detected", "kv_blocks_note", "duplicate_nonces", "n_not_computable")
    N_TOTAL_FIELD_NUMBER: _ClassVar[int]
    N_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    MISMATCH_NONCES_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    FRAUD_DETECTED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_NOTE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_NONCES_FIELD_NUMBER: _ClassVar[int]
    N_NOT_COMPUTABLE_FIELD_NUMBER: _ClassVar[int]
    n_total: int
    n_mismatch: int
    mismatch_nonces: _containers.RepeatedScalarFieldContainer[int]
    p_value: float
    fraud_detected: bool
    kv_blocks_note: str
    duplicate_nonces: _containers.RepeatedScalarFieldContainer[int]
    n_not_computable: int
    def __init__(self, n_total: _Optional[int] = ..., n_mismatch: _Optional[int] = ..., mismatch_nonces: _Optional[_Iterable[int]] = ..., p_value: _Optional[float] = ..., fraud_detected: bool = ..., kv_blocks_note: _Optional[str] = ..., duplicate_nonces: _Optional[_Iterable[int]] = ..., n_not_computable: _Optional[int] = ...) -> None: ...
