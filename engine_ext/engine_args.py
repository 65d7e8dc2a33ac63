"""vLLM's engine arguments as the server's command line takes them (vLLM's own parser and flags),
and the settings the engine is started with. Opaque to the server, which imports nothing from vLLM."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser

log = logging.getLogger(__name__)

# vLLM's batch defaults depend on it; the engine is started as vLLM's API server starts it.
USAGE_CONTEXT = UsageContext.OPENAI_API_SERVER
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# vLLM's max_num_seqs default on CPU for USAGE_CONTEXT, per tensor x pipeline rank (0.15.1 to 0.28.0)
# (EngineArgs.get_batch_defaults; asking it directly would log a warning about the unset variable).
CPU_DEFAULT_MAX_NUM_SEQS_PER_RANK = 128
GIB = 1024**3
# K and V, bf16.
KV_TENSORS_PER_LAYER = 2
KV_BYTES_PER_VALUE = 2
# Grammar degradation during validation replays is a seam on xgrammar's grammar class only
# (engine_ext.seams); vLLM's default, "auto", hands what xgrammar cannot compile to guidance or outlines.
STRUCTURED_OUTPUT_BACKEND: Final = "xgrammar"
VLLM_DEFAULT_STRUCTURED_OUTPUT_BACKEND = "auto"
# The production PoC batch, 32 x 1024 tokens (poc-v2.md section 9).
POC_MAX_NUM_BATCHED_TOKENS = 32768
# vLLM's own default --max-logprobs, and what the server raises it to: a validation replay whose mode
# nobody states carries both modes' lists, 2k + 1 entries (engine_ext.generation.both_logprobs_modes), for k up to
# the contract's 20 (clients stay bounded by 20: engine_ext.model_facts).
VLLM_DEFAULT_MAX_LOGPROBS = 20
MAX_LOGPROBS_FOR_BOTH_MODES = 2 * VLLM_DEFAULT_MAX_LOGPROBS + 1


@dataclass(frozen=True)
class DefaultModel:
    """What the engine serves when no --model is given."""

    served_model_name: str
    # --model's help text (vLLM's names its own hub default).
    flag_help: str
    # Returns the model directory, building it on first use.
    locate: Callable[[], Path]


@dataclass(frozen=True)
class EngineSettings:
    """What create_engine starts: vLLM's engine arguments, and environment variables to set first
    (the engine processes inherit the environment)."""

    vllm_args: AsyncEngineArgs
    environment: Mapping[str, str] = field(default_factory=dict)


def build_engine_parser(
    prog: str,
    description: str,
    add_server_arguments: Callable[[argparse.ArgumentParser], None],
    default_model: DefaultModel,
) -> argparse.ArgumentParser:
    """The server's flags beside every vLLM engine flag, with vLLM's `--help=<group>` and `--config`."""
    parser = FlexibleArgumentParser(prog=prog, description=description)
    add_server_arguments(parser)
    AsyncEngineArgs.add_cli_args(parser)
    # vLLM's default would fetch a model from the hub; without --model the default model serves.
    parser.set_defaults(model=None)
    # argparse has no public lookup of an action by its flag.
    parser._option_string_actions["--model"].help = default_model.flag_help
    return parser


def engine_args_from(namespace: argparse.Namespace, default_model: DefaultModel) -> EngineSettings:
    if namespace.model is not None:
        return EngineSettings(_with_server_defaults(AsyncEngineArgs.from_cli_args(namespace)))
    served_names = namespace.served_model_name or [default_model.served_model_name]
    model_dir = default_model.locate()
    args = AsyncEngineArgs.from_cli_args(
        argparse.Namespace(**{**vars(namespace), "model": str(model_dir), "served_model_name": served_names})
    )
    return EngineSettings(_with_server_defaults(args), _default_model_environment(args, model_dir))


def _with_server_defaults(args: AsyncEngineArgs) -> AsyncEngineArgs:
    return _with_room_for_both_logprobs_modes(_with_poc_batch_budget(_with_xgrammar_by_default(args)))


def _with_room_for_both_logprobs_modes(args: AsyncEngineArgs) -> AsyncEngineArgs:
    """vLLM's default --max-logprobs (20) becomes MAX_LOGPROBS_FOR_BOTH_MODES, so that a replay of unstated
    mode fits for every k a client may ask; an operator's other value stands (a replay whose 2k + 1 does
    not fit then falls back to the spec's padding count)."""
    if args.max_logprobs == VLLM_DEFAULT_MAX_LOGPROBS:
        args.max_logprobs = MAX_LOGPROBS_FOR_BOTH_MODES
    return args


def _with_poc_batch_budget(args: AsyncEngineArgs) -> AsyncEngineArgs:
    """The network's PoC batch (32 nonces x 1024 tokens) must fit one engine step: the size vLLM
    profiles (on GPU, workspace-backed kernels assert past it). An operator's value stands."""
    if args.max_num_batched_tokens is None:
        args.max_num_batched_tokens = POC_MAX_NUM_BATCHED_TOKENS
    return args


def _with_xgrammar_by_default(args: AsyncEngineArgs) -> AsyncEngineArgs:
    """vLLM's default backend becomes xgrammar, keeping the user's other structured-output settings;
    a backend the user named is left as it is, for the engine factory to refuse."""
    config = args.structured_outputs_config
    if config.backend == VLLM_DEFAULT_STRUCTURED_OUTPUT_BACKEND:
        args.structured_outputs_config = dataclasses.replace(config, backend=STRUCTURED_OUTPUT_BACKEND)
    return args


def _default_model_environment(args: AsyncEngineArgs, model_dir: Path) -> dict[str, str]:
    """On CPU, vLLM's unset-variable default reserves half the machine's memory for KV cache (11.8 GiB
    on a 24 GiB host), so two servers do not fit; the default model gets what its context needs."""
    if not current_platform.is_cpu() or CPU_KV_CACHE_ENV in os.environ:
        return {}
    config = json.loads((model_dir / "config.json").read_text())
    # Unset, or -1 ("auto": as long as the KV cache allows): the model's own context.
    max_model_len = args.max_model_len if (args.max_model_len or 0) > 0 else config["max_position_embeddings"]
    ranks = args.tensor_parallel_size * args.pipeline_parallel_size
    max_num_seqs = args.max_num_seqs or CPU_DEFAULT_MAX_NUM_SEQS_PER_RANK * ranks
    gib = kv_cache_gib_for_whole_context(config, max_model_len, max_num_seqs)
    log.info(
        "KV cache: %d GiB, for %d sequences of %d tokens (the default model's whole context at the "
        "batch's full concurrency); set %s (GiB) to change it",
        gib,
        max_num_seqs,
        max_model_len,
        CPU_KV_CACHE_ENV,
    )
    return {CPU_KV_CACHE_ENV: str(gib)}


def kv_cache_gib_for_whole_context(model_config: Mapping[str, Any], max_model_len: int, max_num_seqs: int) -> int:
    """Whole GiB of KV cache that hold `max_num_seqs` sequences of `max_model_len` tokens (bf16)."""
    head_dim = model_config.get("head_dim") or model_config["hidden_size"] // model_config["num_attention_heads"]
    bytes_per_token = (
        KV_TENSORS_PER_LAYER
        * model_config["num_hidden_layers"]
        * model_config["num_key_value_heads"]
        * head_dim
        * KV_BYTES_PER_VALUE
    )
    return math.ceil(bytes_per_token * max_model_len * max_num_seqs / GIB)
