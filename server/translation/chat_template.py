"""Which template variables a client may set: those the served chat template itself declares.

A client's `template_kwargs` used to reach the tokenizer's `apply_chat_template` whole, so a client
could pass `chat_template` (its own Jinja, the route of CVE-2025-61620) or Hugging Face's own
parameters (`return_dict` makes the prompt the dict's keys). The template is parsed once at start;
only its undeclared variables, less what the server and Hugging Face supply themselves, are open
to clients, and each key is checked against them.
"""

from __future__ import annotations

import inspect
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Filled by the server (the request's messages and add_generation_prompt) or by Hugging Face's
# template environment (its helper functions).
SUPPLIED_BY_THE_SERVER = frozenset({"messages", "add_generation_prompt", "raise_exception", "strftime_now"})
# apply_chat_template parameters that do reach the template as variables.
TEMPLATE_PARAMETERS = frozenset({"tools", "documents"})


def client_template_variables(tokenizer: Any) -> frozenset[str]:
    """The variables of the tokenizer's chat template(s) a client may set (empty without a template)."""
    source = getattr(tokenizer, "chat_template", None)
    if not source:
        return frozenset()
    sources = source.values() if isinstance(source, dict) else (source,)
    declared: set[str] = set()
    for text in sources:
        declared |= template_variables(text)
    return frozenset(declared - SUPPLIED_BY_THE_SERVER - _reserved_names(tokenizer))


def template_variables(source: str) -> set[str]:
    try:
        parsed = ImmutableSandboxedEnvironment().parse(source)
    except jinja2.TemplateSyntaxError:
        return set()  # rendering will fail and say why; no variable is open meanwhile
    return set(meta.find_undeclared_variables(parsed))


def _reserved_names(tokenizer: Any) -> set[str]:
    """Names Hugging Face binds itself: apply_chat_template's own parameters and the special tokens."""
    parameters = set(inspect.signature(tokenizer.apply_chat_template).parameters) - TEMPLATE_PARAMETERS - {"kwargs"}
    special_tokens = set(getattr(tokenizer, "special_tokens_map", {}))
    return parameters | special_tokens | {"bos_token", "eos_token", "unk_token", "pad_token"}
