"""The engine flags every configuration gets: sized for the run's largest concurrency, then the
user's --server-flags, whose own sizes replace those (the model, served name and address are the
benchmark's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.serving.settings import DEFAULT_MAX_NUM_SEQS, MAX_BATCHED_TOKENS, flattened, sized_engine_flags

# Set by the benchmark: the clients and the launcher depend on them.
RESERVED_FLAGS = ("--model", "--served-model-name", "--host", "--port")
# The step budget is rounded up to whole KiB of tokens: a round number reads better in the logs.
BATCH_TOKEN_GRANULE = 1024


@dataclass(frozen=True)
class EngineFlags:
    flags: tuple[str, ...]  # after --model
    max_model_len: int
    max_num_batched_tokens: int


def given_flags(tokens: Sequence[str]) -> dict[str, str | None]:
    """Each `--flag` in `tokens`, spelt as vLLM's parser reads it (underscores as dashes), with its
    value (`--flag value` or `--flag=value`; None for a switch); the last one wins, as in argparse."""
    values: dict[str, str | None] = {}
    for index, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        name, equals, inline = token.partition("=")
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if equals:
            values[name.replace("_", "-")] = inline
        else:
            values[name.replace("_", "-")] = (
                following if following is not None and not following.startswith("--") else None
            )
    return values


def reserved_flags_in(tokens: Sequence[str]) -> list[str]:
    return sorted(set(given_flags(tokens)) & set(RESERVED_FLAGS))


def engine_flags(server_flags: Sequence[str], max_streams: int, prompt_tokens: int) -> EngineFlags:
    """Raises ValueError when --server-flags gives a size that is not a whole number."""
    # A round's streams all start together: their prompts plus one decode token each in one step
    # (see settings.MAX_BATCHED_TOKENS), and one batch slot each.
    step_tokens = -(-max_streams * (prompt_tokens + 1) // BATCH_TOKEN_GRANULE) * BATCH_TOKEN_GRANULE
    sized = sized_engine_flags(max(DEFAULT_MAX_NUM_SEQS, max_streams), max(MAX_BATCHED_TOKENS, step_tokens))
    given = given_flags(server_flags)
    kept = {flag: value for flag, value in sized.items() if flag not in given}

    def effective(flag: str) -> int:
        value = given.get(flag, sized[flag])
        try:
            return int(value or "")
        except ValueError:
            raise ValueError(f"--server-flags: {flag} needs a whole number here, not {value!r}") from None

    return EngineFlags(
        (*flattened(kept), *server_flags),
        effective("--max-model-len"),
        effective("--max-num-batched-tokens"),
    )
