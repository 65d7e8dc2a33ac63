from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INVALID_FIELD: _ClassVar[ErrorReason]
    TOKEN_OUT_OF_VOCABULARY: _ClassVar[ErrorReason]
    CONTEXT_LENGTH_EXCEEDED: _ClassVar[ErrorReason]
    INVALID_CONSTRAINT: _ClassVar[ErrorReason]
    DUPLICATE_REQUEST_ID: _ClassVar[ErrorReason]
    REQUEST_NOT_FOUND: _ClassVar[ErrorReason]
    SHUTTING_DOWN: _ClassVar[ErrorReason]
    ENGINE_DEAD: _ClassVar[ErrorReason]
    INTERNAL_ERROR: _ClassVar[ErrorReason]
    PROMPT_TOO_LONG: _ClassVar[ErrorReason]
    MALFORMED_REQUEST: _ClassVar[ErrorReason]
    ENGINE_CALL_TIMEOUT: _ClassVar[ErrorReason]
    ENGINE_PAUSED: _ClassVar[ErrorReason]
    POC_IN_PROGRESS: _ClassVar[ErrorReason]
    POC_PREEMPTED: _ClassVar[ErrorReason]
    MODEL_MISMATCH: _ClassVar[ErrorReason]
    ROUND_ALREADY_RUNNING: _ClassVar[ErrorReason]
    ROUND_NOT_FOUND: _ClassVar[ErrorReason]
    AUTH_TOKEN_REQUIRED: _ClassVar[ErrorReason]
    AUTH_TOKEN_INVALID: _ClassVar[ErrorReason]
    TOO_MANY_STREAMS: _ClassVar[ErrorReason]
    NON_FINITE_BATCH: _ClassVar[ErrorReason]
    KV_BLOCKS_EXHAUSTED: _ClassVar[ErrorReason]
    REPLAY_INCOMPLETE: _ClassVar[ErrorReason]
    POC_DISABLED: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
INVALID_FIELD: ErrorReason
TOKEN_OUT_OF_VOCABULARY: ErrorReason
CONTEXT_LENGTH_EXCEEDED: ErrorReason
INVALID_CONSTRAINT: ErrorReason
DUPLICATE_REQUEST_ID: ErrorReason
REQUEST_NOT_FOUND: ErrorReason
SHUTTING_DOWN: ErrorReason
ENGINE_DEAD: ErrorReason
INTERNAL_ERROR: ErrorReason
PROMPT_TOO_LONG: ErrorReason
MALFORMED_REQUEST: ErrorReason
ENGINE_CALL_TIMEOUT: ErrorReason
ENGINE_PAUSED: ErrorReason
POC_IN_PROGRESS: ErrorReason
POC_PREEMPTED: ErrorReason
MODEL_MISMATCH: ErrorReason
ROUND_ALREADY_RUNNING: ErrorReason
ROUND_NOT_FOUND: ErrorReason
AUTH_TOKEN_REQUIRED: ErrorReason
AUTH_TOKEN_INVALID: ErrorReason
TOO_MANY_STREAMS: ErrorReason
NON_FINITE_BATCH: ErrorReason
KV_BLOCKS_EXHAUSTED: ErrorReason
REPLAY_INCOMPLETE: ErrorReason
POC_DISABLED: ErrorReason
