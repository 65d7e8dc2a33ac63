"""Builds GenerateRequests from plain Python values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.struct_pb2 import Struct

from gonka.mlnode.v1 import inference_pb2 as pb

ROLES = {
    "system": pb.CHAT_ROLE_SYSTEM,
    "user": pb.CHAT_ROLE_USER,
    "assistant": pb.CHAT_ROLE_ASSISTANT,
    "tool": pb.CHAT_ROLE_TOOL,
}
SAMPLING_FIELDS = frozenset(pb.SamplingOptions.DESCRIPTOR.fields_by_name)
LOGPROBS_MODES = {"raw": pb.LOGPROBS_MODE_RAW, "processed": pb.LOGPROBS_MODE_PROCESSED}


def build_request(
    *,
    prompt: str | None = None,
    token_ids: Sequence[int] | None = None,
    messages: Sequence[tuple[str, str]] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    add_generation_prompt: bool | None = None,
    request_id: str = "",
    top_logprobs: int | None = None,
    prompt_logprobs: int | None = None,
    logprobs_mode: str | None = None,
    chain_top_logprobs: bool = False,
    enforced_token_ids: Sequence[int] | None = None,
    include_prompt_token_ids: bool = False,
    json_schema: str | None = None,
    regex: str | None = None,
    grammar: str | None = None,
    choice: Sequence[str] | None = None,
    json_object: bool = False,
    include_text: bool = False,
    max_tokens_per_message: int = 0,
    final_only: bool = False,
    coalesce_ms: int = 0,
    **sampling: Any,
) -> pb.GenerateRequest:
    """Exactly one of prompt, token_ids or messages ((role, content) pairs). Other keyword arguments
    are SamplingOptions fields (temperature=, max_tokens=, seed=, stop=[...], ...)."""
    if sum(value is not None for value in (prompt, token_ids, messages)) != 1:
        raise ValueError("give exactly one of prompt, token_ids or messages")
    unknown = set(sampling) - SAMPLING_FIELDS
    if unknown:
        raise TypeError(f"unknown sampling option(s): {', '.join(sorted(unknown))}")
    request = pb.GenerateRequest(
        request_id=request_id,
        sampling=pb.SamplingOptions(**{name: value for name, value in sampling.items() if value is not None}),
        stream=pb.StreamOptions(
            include_text=include_text,
            max_tokens_per_message=max_tokens_per_message,
            final_only=final_only,
            coalesce_ms=coalesce_ms,
            include_prompt_token_ids=include_prompt_token_ids,
        ),
    )
    if enforced_token_ids is not None:
        request.enforced_token_ids.extend(enforced_token_ids)
    if prompt is not None:
        request.text = prompt
    elif token_ids is not None:
        request.token_ids.ids.extend(token_ids)
    else:
        assert messages is not None  # exactly one of the three (checked above)
        chat = request.chat
        for role, content in messages:
            if role not in ROLES:
                raise ValueError(f"unknown chat role {role!r}; expected one of {', '.join(ROLES)}")
            chat.messages.add(role=ROLES[role], content=content)
        if add_generation_prompt is not None:
            chat.add_generation_prompt = add_generation_prompt
        if chat_template_kwargs:
            kwargs = Struct()
            kwargs.update(chat_template_kwargs)
            chat.template_kwargs.CopyFrom(kwargs)
    # Presence matters: top_logprobs=0 asks for the chosen tokens' logprobs, None for none of them.
    if top_logprobs is not None:
        request.logprobs.top_logprobs = top_logprobs
    if prompt_logprobs is not None:
        request.logprobs.prompt_logprobs = prompt_logprobs
    if logprobs_mode is not None:
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs mode {logprobs_mode!r}; expected one of {', '.join(LOGPROBS_MODES)}")
        request.logprobs.mode = LOGPROBS_MODES[logprobs_mode]
    if chain_top_logprobs:
        request.logprobs.chain_top_logprobs = True
    constraints = {
        "json_schema": json_schema,
        "regex": regex,
        "grammar": grammar,
        "choice": choice,
        "json_object": json_object or None,
    }
    chosen = {name: value for name, value in constraints.items() if value is not None}
    if len(chosen) > 1:
        raise ValueError(f"give at most one structured-output constraint, got {', '.join(chosen)}")
    for name, value in chosen.items():
        if name == "choice":
            request.structured_output.choice.choices.extend(choice or ())
        else:
            setattr(request.structured_output, name, value)
    return request
