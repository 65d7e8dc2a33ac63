from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChatRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHAT_ROLE_UNSPECIFIED: _ClassVar[ChatRole]
    CHAT_ROLE_SYSTEM: _ClassVar[ChatRole]
    CHAT_ROLE_USER: _ClassVar[ChatRole]
    CHAT_ROLE_ASSISTANT: _ClassVar[ChatRole]
    CHAT_ROLE_TOOL: _ClassVar[ChatRole]

class LogprobsMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOGPROBS_MODE_UNSPECIFIED: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_RAW: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_PROCESSED: _ClassVar[LogprobsMode]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]
CHAT_ROLE_UNSPECIFIED: ChatRole
CHAT_ROLE_SYSTEM: ChatRole
CHAT_ROLE_USER: ChatRole
CHAT_ROLE_ASSISTANT: ChatRole
CHAT_ROLE_TOOL: ChatRole
LOGPROBS_MODE_UNSPECIFIED: LogprobsMode
LOGPROBS_MODE_RAW: LogprobsMode
LOGPROBS_MODE_PROCESSED: LogprobsMode
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason
FINISH_REASON_ERROR: FinishReason

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "token_ids", "text", "chat", "sampling", "logprobs", "structured_output", "stream", "enforced_token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: TokenIds
    text: str
    chat: ChatInput
    sampling: SamplingOptions
    logprobs: LogprobsOptions
    structured_output: StructuredOutput
    stream: StreamOptions
    enforced_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatInput, _Mapping]] = ..., sampling: _Optional[_Union[SamplingOptions, _Mapping]] = ..., logprobs: _Optional[_Union[LogprobsOptions, _Mapping]] = ..., structured_output: _Optional[_Union[StructuredOutput, _Mapping]] = ..., stream: _Optional[_Union[StreamOptions, _Mapping]] = ..., enforced_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: ChatRole
    content: str
    def __init__(self, role: _Optional[_Union[ChatRole, str]] = ..., content: _Optional[str] = ...) -> None: ...

class ChatInput(_message.Message):
    __slots__ = ("messages", "add_generation_prompt", "template_kwargs")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    add_generation_prompt: bool
    template_kwargs: _struct_pb2.Struct
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., add_generation_prompt: bool = ..., template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SamplingOptions(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "max_tokens", "min_tokens", "stop", "stop_token_ids", "ignore_eos", "n", "skip_special_tokens", "include_stop_str_in_output")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    seed: int
    max_tokens: int
    min_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    n: int
    skip_special_tokens: bool
    include_stop_str_in_output: bool
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: bool = ..., n: _Optional[int] = ..., skip_special_tokens: bool = ..., include_stop_str_in_output: bool = ...) -> None: ...

class LogprobsOptions(_message.Message):
    __slots__ = ("top_logprobs", "prompt_logprobs", "mode", "chain_top_logprobs")
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CHAIN_TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    top_logprobs: int
    prompt_logprobs: int
    mode: LogprobsMode
    chain_top_logprobs: bool
    def __init__(self, top_logprobs: _Optional[int] = ..., prompt_logprobs: _Optional[int] = ..., mode: _Optional[_Union[LogprobsMode, str]] = ..., chain_top_logprobs: bool = ...) -> None: ...

class StructuredOutput(_message.Message):
    __slots__ = ("json_schema", "regex", "grammar", "choice", "json_object")
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    json_schema: str
    regex: str
    grammar: str
    choice: ChoiceList
    json_object: bool
    def __init__(self, json_schema: _Optional[str] = ..., regex: _Optional[str] = ..., grammar: _Optional[str] = ..., choice: _Optional[_Union[ChoiceList, _Mapping]] = ..., json_object: bool = ...) -> None: ...

class ChoiceList(_message.Message):
    __slots__ = ("choices",)
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, choices: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamOptions(_message.Message):
    __slots__ = ("max_tokens_per_message", "include_text", "final_only", "coalesce_ms", "include_prompt_token_ids")
    MAX_TOKENS_PER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TEXT_FIELD_NUMBER: _ClassVar[int]
    FINAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    COALESCE_MS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    max_tokens_per_message: int
    include_text: bool
    final_only: bool
    coalesce_ms: int
    include_prompt_token_ids: bool
    def __init__(self, max_tokens_per_message: _Optional[int] = ..., include_text: bool = ..., final_only: bool = ..., coalesce_ms: _Optional[int] = ..., include_prompt_token_ids: bool = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "output_index", "tokens", "text", "prompt_logprobs", "finish", "prompt_token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    output_index: int
    tokens: TokenBatch
    text: str
    prompt_logprobs: PromptLogprobs
    finish: Finish
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., output_index: _Optional[int] = ..., tokens: _Optional[_Union[TokenBatch, _Mapping]] = ..., text: _Optional[str] = ..., prompt_logprobs: _Optional[_Union[PromptLogprobs, _Mapping]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenBatch(_message.Message):
    __slots__ = ("ids", "logprobs", "ranks", "top_k", "top_ids", "top_logprobs", "chain_top_ids", "chain_top_logprobs")
    IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CHAIN_TOP_IDS_FIELD_NUMBER: _ClassVar[int]
    CHAIN_TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    ranks: _containers.RepeatedScalarFieldContainer[int]
    top_k: int
    top_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    chain_top_ids: _containers.RepeatedScalarFieldContainer[int]
    chain_top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., ranks: _Optional[_Iterable[int]] = ..., top_k: _Optional[int] = ..., top_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ..., chain_top_ids: _Optional[_Iterable[int]] = ..., chain_top_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class PromptLogprobs(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: TokenBatch
    def __init__(self, tokens: _Optional[_Union[TokenBatch, _Mapping]] = ...) -> None: ...

class Finish(_message.Message):
    __slots__ = ("reason", "stop_string", "stop_token_id", "usage")
    REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    reason: FinishReason
    stop_string: str
    stop_token_id: int
    usage: Usage
    def __init__(self, reason: _Optional[_Union[FinishReason, str]] = ..., stop_string: _Optional[str] = ..., stop_token_id: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("served_model_name", "model_path", "max_context_length", "vocab_size", "eos_token_id", "bos_token_id", "dtype", "max_logprobs", "tensor_parallel_size", "has_chat_template", "tokenizer_max_token_id", "max_prompt_chars", "max_request_bytes", "template_variables")
    SERVED_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    HAS_CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_MAX_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_PROMPT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_VARIABLES_FIELD_NUMBER: _ClassVar[int]
    served_model_name: str
    model_path: str
    max_context_length: int
    vocab_size: int
    eos_token_id: int
    bos_token_id: int
    dtype: str
    max_logprobs: int
    tensor_parallel_size: int
    has_chat_template: bool
    tokenizer_max_token_id: int
    max_prompt_chars: int
    max_request_bytes: int
    template_variables: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, served_model_name: _Optional[str] = ..., model_path: _Optional[str] = ..., max_context_length: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_id: _Optional[int] = ..., bos_token_id: _Optional[int] = ..., dtype: _Optional[str] = ..., max_logprobs: _Optional[int] = ..., tensor_parallel_size: _Optional[int] = ..., has_chat_template: bool = ..., tokenizer_max_token_id: _Optional[int] = ..., max_prompt_chars: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., template_variables: _Optional[_Iterable[str]] = ...) -> None: ...

class GetServerStatusRequest(_message.Message):
    __slots__ = ("include_engine_processes",)
    INCLUDE_ENGINE_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    include_engine_processes: bool
    def __init__(self, include_engine_processes: bool = ...) -> None: ...

class GetServerStatusResponse(_message.Message):
    __slots__ = ("running_requests", "waiting_requests", "kv_cache_usage", "active_streams", "uptime_seconds", "versions", "engine_processes", "engine_problem", "contract_revision", "contract_digest", "inference_gate_closed", "poc_round_id")
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_STREAMS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    ENGINE_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_REVISION_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_GATE_CLOSED_FIELD_NUMBER: _ClassVar[int]
    POC_ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    running_requests: int
    waiting_requests: int
    kv_cache_usage: float
    active_streams: int
    uptime_seconds: float
    versions: Versions
    engine_processes: _containers.RepeatedCompositeFieldContainer[EngineProcess]
    engine_problem: str
    contract_revision: int
    contract_digest: str
    inference_gate_closed: bool
    poc_round_id: str
    def __init__(self, running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., active_streams: _Optional[int] = ..., uptime_seconds: _Optional[float] = ..., versions: _Optional[_Union[Versions, _Mapping]] = ..., engine_processes: _Optional[_Iterable[_Union[EngineProcess, _Mapping]]] = ..., engine_problem: _Optional[str] = ..., contract_revision: _Optional[int] = ..., contract_digest: _Optional[str] = ..., inference_gate_closed: bool = ..., poc_round_id: _Optional[str] = ...) -> None: ...

class EngineProcess(_message.Message):
    __slots__ = ("role", "pid", "vllm_version", "seams", "model_runner")
    class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ROLE_UNSPECIFIED: _ClassVar[EngineProcess.Role]
        ROLE_ENGINE_CORE: _ClassVar[EngineProcess.Role]
        ROLE_WORKER: _ClassVar[EngineProcess.Role]
    ROLE_UNSPECIFIED: EngineProcess.Role
    ROLE_ENGINE_CORE: EngineProcess.Role
    ROLE_WORKER: EngineProcess.Role
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    VLLM_VERSION_FIELD_NUMBER: _ClassVar[int]
    SEAMS_FIELD_NUMBER: _ClassVar[int]
    MODEL_RUNNER_FIELD_NUMBER: _ClassVar[int]
    role: EngineProcess.Role
    pid: int
    vllm_version: str
    seams: _containers.RepeatedScalarFieldContainer[str]
    model_runner: str
    def __init__(self, role: _Optional[_Union[EngineProcess.Role, str]] = ..., pid: _Optional[int] = ..., vllm_version: _Optional[str] = ..., seams: _Optional[_Iterable[str]] = ..., model_runner: _Optional[str] = ...) -> None: ...

class Versions(_message.Message):
    __slots__ = ("server", "vllm", "torch", "python", "grpc")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    VLLM_FIELD_NUMBER: _ClassVar[int]
    TORCH_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    GRPC_FIELD_NUMBER: _ClassVar[int]
    server: str
    vllm: str
    torch: str
    python: str
    grpc: str
    def __init__(self, server: _Optional[str] = ..., vllm: _Optional[str] = ..., torch: _Optional[str] = ..., python: _Optional[str] = ..., grpc: _Optional[str] = ...) -> None: ...
