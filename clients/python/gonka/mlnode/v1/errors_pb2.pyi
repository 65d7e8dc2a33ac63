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
