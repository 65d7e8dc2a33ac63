"""What the streams ask for: the chat prompt, sampling, seeds and token counts of each kind of round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.serving.errors import BenchmarkError

TOP_LOGPROBS = 5
TEMPERATURE = 1.0
MEASURED_SEED_BASE = 1  # measured round i-th stream: seed 1 + i, the same on every server
WARMUP_SEED_BASE = 100_000
# Enough for first-use code paths, the batch shapes and gRPC's flow-control windows.
WARMUP_TOKENS = 16
# Extra TTFT rounds stop at the first token: it lands exactly as in a full-length round.
TTFT_ROUND_TOKENS = 1
TTFT_SEED_BASE = 200_000
CHAT_MESSAGES = (
    ("system", "You are a careful assistant. Answer in plain prose, without lists or headings."),
    (
        "user",
        (
            "Explain how a transformer language model generates text one token at a time: what the "
            "key-value cache stores, why batching many requests raises throughput, and how sampling "
            "with a temperature and a fixed random seed makes the output reproducible."
        ),
    ),
)


@dataclass(frozen=True)
class Workload:
    messages: tuple[tuple[str, str], ...]
    prompt_ids: tuple[int, ...]
    tokens: int
    # Also run ours with StreamOptions.coalesce_ms (an opt-in: several tokens per message); 0: not.
    coalesce_ms: int


def logprobs_label(logprobs: bool) -> str:
    return f"top-{TOP_LOGPROBS}" if logprobs else "none"


def require_one_step_prefill(workload: Workload, concurrencies: Sequence[int], max_num_batched_tokens: int) -> None:
    """All of a round's prompts (plus one decode token per stream) must fit one engine step; see
    settings.MAX_BATCHED_TOKENS for the engine crash a chunked seeded prefill causes on CPU."""
    needed = max(concurrencies) * (len(workload.prompt_ids) + 1)
    if needed > max_num_batched_tokens:
        raise BenchmarkError(
            f"{max(concurrencies)} streams of a {len(workload.prompt_ids)}-token prompt need {needed} tokens in one "
            f"engine step; --max-num-batched-tokens is {max_num_batched_tokens}"
        )


def render_prompt(model: Path, messages: Sequence[tuple[str, str]]) -> list[int]:
    """The chat prompt as token ids, rendered once with the model's own tokenizer and template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = [{"role": role, "content": content} for role, content in messages]
    # return_dict=False: transformers 5 (beside vLLM 0.20) returns a BatchEncoding by default.
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
