from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RoundState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUND_STATE_UNSPECIFIED: _ClassVar[RoundState]
    ROUND_STATE_GENERATING: _ClassVar[RoundState]
    ROUND_STATE_STOPPING: _ClassVar[RoundState]
    ROUND_STATE_STOPPED: _ClassVar[RoundState]
    ROUND_STATE_FAILED: _ClassVar[RoundState]

class NonceErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONCE_ERROR_REASON_UNSPECIFIED: _ClassVar[NonceErrorReason]
    NONCE_ERROR_REASON_NON_FINITE_HIDDEN: _ClassVar[NonceErrorReason]
    NONCE_ERROR_REASON_NON_FINITE_VECTOR: _ClassVar[NonceErrorReason]
    NONCE_ERROR_REASON_ZERO_VECTOR: _ClassVar[NonceErrorReason]

class SubscriptionEndReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_END_REASON_UNSPECIFIED: _ClassVar[SubscriptionEndReason]
    SUBSCRIPTION_END_REASON_ROUND_STOPPED: _ClassVar[SubscriptionEndReason]
    SUBSCRIPTION_END_REASON_ROUND_FAILED: _ClassVar[SubscriptionEndReason]
    SUBSCRIPTION_END_REASON_SERVER_SHUTTING_DOWN: _ClassVar[SubscriptionEndReason]
ROUND_STATE_UNSPECIFIED: RoundState
ROUND_STATE_GENERATING: RoundState
ROUND_STATE_STOPPING: RoundState
ROUND_STATE_STOPPED: RoundState
ROUND_STATE_FAILED: RoundState
NONCE_ERROR_REASON_UNSPECIFIED: NonceErrorReason
NONCE_ERROR_REASON_NON_FINITE_HIDDEN: NonceErrorReason
NONCE_ERROR_REASON_NON_FINITE_VECTOR: NonceErrorReason
NONCE_ERROR_REASON_ZERO_VECTOR: NonceErrorReason
SUBSCRIPTION_END_REASON_UNSPECIFIED: SubscriptionEndReason
SUBSCRIPTION_END_REASON_ROUND_STOPPED: SubscriptionEndReason
SUBSCRIPTION_END_REASON_ROUND_FAILED: SubscriptionEndReason
SUBSCRIPTION_END_REASON_SERVER_SHUTTING_DOWN: SubscriptionEndReason

class PocParams(_message.Message):
    __slots__ = ("model", "seq_len", "k_dim")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    K_DIM_FIELD_NUMBER: _ClassVar[int]
    model: str
    seq_len: int
    k_dim: int
    def __init__(self, model: _Optional[str] = ..., seq_len: _Optional[int] = ..., k_dim: _Optional[int] = ...) -> None: ...

class StartRoundRequest(_message.Message):
    __slots__ = ("block_hash", "block_height", "public_key", "node_id", "node_count", "group_id", "group_count", "params", "batch_size", "stronger_rng", "callback_url")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRONGER_RNG_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_URL_FIELD_NUMBER: _ClassVar[int]
    block_hash: str
    block_height: int
    public_key: str
    node_id: int
    node_count: int
    group_id: int
    group_count: int
    params: PocParams
    batch_size: int
    stronger_rng: bool
    callback_url: str
    def __init__(self, block_hash: _Optional[str] = ..., block_height: _Optional[int] = ..., public_key: _Optional[str] = ..., node_id: _Optional[int] = ..., node_count: _Optional[int] = ..., group_id: _Optional[int] = ..., group_count: _Optional[int] = ..., params: _Optional[_Union[PocParams, _Mapping]] = ..., batch_size: _Optional[int] = ..., stronger_rng: bool = ..., callback_url: _Optional[str] = ...) -> None: ...

class StartRoundResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: RoundStatus
    def __init__(self, status: _Optional[_Union[RoundStatus, _Mapping]] = ...) -> None: ...

class StopRoundRequest(_message.Message):
    __slots__ = ("round_id",)
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    def __init__(self, round_id: _Optional[str] = ...) -> None: ...

class StopRoundResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: RoundStatus
    def __init__(self, status: _Optional[_Union[RoundStatus, _Mapping]] = ...) -> None: ...

class GetRoundStatusRequest(_message.Message):
    __slots__ = ("round_id",)
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    def __init__(self, round_id: _Optional[str] = ...) -> None: ...

class GetRoundStatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: RoundStatus
    def __init__(self, status: _Optional[_Union[RoundStatus, _Mapping]] = ...) -> None: ...

class RoundStatus(_message.Message):
    __slots__ = ("round_id", "state", "parameters", "nonces_produced", "nonces_per_second_last_minute", "nonces_per_second_round", "last_sequence", "rejected_batches", "seconds_outside_forward_per_batch", "forward_seconds_per_batch", "seconds_to_first_batch", "started_at_unix", "failure", "callback", "preempted_streams", "kv_blocks_note", "seconds_stop_to_last_forward", "groups", "nonces_failed")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    NONCES_PRODUCED_FIELD_NUMBER: _ClassVar[int]
    NONCES_PER_SECOND_LAST_MINUTE_FIELD_NUMBER: _ClassVar[int]
    NONCES_PER_SECOND_ROUND_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_OUTSIDE_FORWARD_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    FORWARD_SECONDS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    SECONDS_TO_FIRST_BATCH_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_NOTE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_STOP_TO_LAST_FORWARD_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NONCES_FAILED_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    state: RoundState
    parameters: StartRoundRequest
    nonces_produced: int
    nonces_per_second_last_minute: float
    nonces_per_second_round: float
    last_sequence: int
    rejected_batches: int
    seconds_outside_forward_per_batch: float
    forward_seconds_per_batch: float
    seconds_to_first_batch: float
    started_at_unix: float
    failure: str
    callback: CallbackCounts
    preempted_streams: int
    kv_blocks_note: str
    seconds_stop_to_last_forward: float
    groups: _containers.RepeatedCompositeFieldContainer[GroupStatus]
    nonces_failed: int
    def __init__(self, round_id: _Optional[str] = ..., state: _Optional[_Union[RoundState, str]] = ..., parameters: _Optional[_Union[StartRoundRequest, _Mapping]] = ..., nonces_produced: _Optional[int] = ..., nonces_per_second_last_minute: _Optional[float] = ..., nonces_per_second_round: _Optional[float] = ..., last_sequence: _Optional[int] = ..., rejected_batches: _Optional[int] = ..., seconds_outside_forward_per_batch: _Optional[float] = ..., forward_seconds_per_batch: _Optional[float] = ..., seconds_to_first_batch: _Optional[float] = ..., started_at_unix: _Optional[float] = ..., failure: _Optional[str] = ..., callback: _Optional[_Union[CallbackCounts, _Mapping]] = ..., preempted_streams: _Optional[int] = ..., kv_blocks_note: _Optional[str] = ..., seconds_stop_to_last_forward: _Optional[float] = ..., groups: _Optional[_Iterable[_Union[GroupStatus, _Mapping]]] = ..., nonces_failed: _Optional[int] = ...) -> None: ...

class GroupStatus(_message.Message):
    __slots__ = ("group_id", "instance", "state", "nonces_produced", "failure")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NONCES_PRODUCED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    group_id: int
    instance: int
    state: RoundState
    nonces_produced: int
    failure: str
    def __init__(self, group_id: _Optional[int] = ..., instance: _Optional[int] = ..., state: _Optional[_Union[RoundState, str]] = ..., nonces_produced: _Optional[int] = ..., failure: _Optional[str] = ...) -> None: ...

class CallbackCounts(_message.Message):
    __slots__ = ("delivered", "pending", "spooled", "given_up", "failed_attempts")
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    SPOOLED_FIELD_NUMBER: _ClassVar[int]
    GIVEN_UP_FIELD_NUMBER: _ClassVar[int]
    FAILED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    delivered: int
    pending: int
    spooled: int
    given_up: int
    failed_attempts: int
    def __init__(self, delivered: _Optional[int] = ..., pending: _Optional[int] = ..., spooled: _Optional[int] = ..., given_up: _Optional[int] = ..., failed_attempts: _Optional[int] = ...) -> None: ...

class ArtifactBatch(_message.Message):
    __slots__ = ("sequence", "nonces", "vectors", "k_dim", "group_id", "instance", "nonce_errors")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    NONCES_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    K_DIM_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    NONCE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    nonces: _containers.RepeatedScalarFieldContainer[int]
    vectors: bytes
    k_dim: int
    group_id: int
    instance: int
    nonce_errors: _containers.RepeatedCompositeFieldContainer[NonceError]
    def __init__(self, sequence: _Optional[int] = ..., nonces: _Optional[_Iterable[int]] = ..., vectors: _Optional[bytes] = ..., k_dim: _Optional[int] = ..., group_id: _Optional[int] = ..., instance: _Optional[int] = ..., nonce_errors: _Optional[_Iterable[_Union[NonceError, _Mapping]]] = ...) -> None: ...

class NonceError(_message.Message):
    __slots__ = ("nonce", "reason", "detail")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    reason: NonceErrorReason
    detail: str
    def __init__(self, nonce: _Optional[int] = ..., reason: _Optional[_Union[NonceErrorReason, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class SubscribeArtifactsRequest(_message.Message):
    __slots__ = ("round_id", "after_sequence")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    after_sequence: int
    def __init__(self, round_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class SubscribeArtifactsResponse(_message.Message):
    __slots__ = ("round_id", "batch", "lost", "end")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    batch: ArtifactBatch
    lost: ArtifactsLost
    end: SubscriptionEnd
    def __init__(self, round_id: _Optional[str] = ..., batch: _Optional[_Union[ArtifactBatch, _Mapping]] = ..., lost: _Optional[_Union[ArtifactsLost, _Mapping]] = ..., end: _Optional[_Union[SubscriptionEnd, _Mapping]] = ...) -> None: ...

class ArtifactsLost(_message.Message):
    __slots__ = ("first_missing_sequence", "last_missing_sequence", "batches", "artifacts")
    FIRST_MISSING_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_MISSING_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    first_missing_sequence: int
    last_missing_sequence: int
    batches: int
    artifacts: int
    def __init__(self, first_missing_sequence: _Optional[int] = ..., last_missing_sequence: _Optional[int] = ..., batches: _Optional[int] = ..., artifacts: _Optional[int] = ...) -> None: ...

class SubscriptionEnd(_message.Message):
    __slots__ = ("reason", "detail", "last_sequence")
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    reason: SubscriptionEndReason
    detail: str
    last_sequence: int
    def __init__(self, reason: _Optional[_Union[SubscriptionEndReason, str]] = ..., detail: _Optional[str] = ..., last_sequence: _Optional[int] = ...) -> None: ...

class ComputeArtifactsRequest(_message.Message):
    __slots__ = ("block_hash", "public_key", "params", "stronger_rng", "nonces", "batch_size")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STRONGER_RNG_FIELD_NUMBER: _ClassVar[int]
    NONCES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    block_hash: str
    public_key: str
    params: PocParams
    stronger_rng: bool
    nonces: _containers.RepeatedScalarFieldContainer[int]
    batch_size: int
    def __init__(self, block_hash: _Optional[str] = ..., public_key: _Optional[str] = ..., params: _Optional[_Union[PocParams, _Mapping]] = ..., stronger_rng: bool = ..., nonces: _Optional[_Iterable[int]] = ..., batch_size: _Optional[int] = ...) -> None: ...

class ComputeArtifactsResponse(_message.Message):
    __slots__ = ("batch", "kv_blocks_note")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_NOTE_FIELD_NUMBER: _ClassVar[int]
    batch: ArtifactBatch
    kv_blocks_note: str
    def __init__(self, batch: _Optional[_Union[ArtifactBatch, _Mapping]] = ..., kv_blocks_note: _Optional[str] = ...) -> None: ...
