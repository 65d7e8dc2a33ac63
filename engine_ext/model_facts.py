"""What the server needs to know about the served model, read once from the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.platforms import current_platform

from engine_ext.poc.batch_caps import PocBatchCap, poc_batch_cap

# The sampling options a model's generation_config may default (vLLM's ModelConfig.get_diff_sampling_param).
SAMPLING_DEFAULT_NAMES = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# The network reports top-5; 20 is vLLM's default ceiling and the contract's.
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class ModelFacts:
    served_model_name: str
    model_path: str
    max_model_len: int
    # Rows of the output layer; may exceed the tokenizer's ids (Qwen pads its embedding).
    vocab_size: int
    tokenizer_max_token_id: int
    eos_token_id: int
    bos_token_id: int | None
    dtype: str
    max_logprobs: int
    tensor_parallel_size: int
    has_chat_template: bool
    # The residual stream's width (H of the PoC spec).
    hidden_size: int = 0
    # The engine's per-step token budget (a PoC batch's B x S must fit it: the size vLLM profiled).
    max_num_batched_tokens: int = 0
    # The most sequences one engine step runs (vLLM sizes attention buffers by it): a PoC batch's B must fit it.
    max_num_seqs: int = 0
    # An upper bound on a PoC batch's B that the engine's configuration imposes, and the flag that lifts it (None: no
    # such bound; engine_ext.poc.batch_caps says which configurations have one).
    poc_batch_cap: PocBatchCap | None = None
    # The model's own sampling defaults (its generation_config, as vLLM's --generation-config reads it): vLLM's OpenAI
    # server applies them to a request that leaves the field unset. (name, value) pairs of SAMPLING_DEFAULT_NAMES.
    sampling_defaults: tuple[tuple[str, float], ...] = ()

    @property
    def max_token_id(self) -> int:
        """Largest id the model accepts as input: its embedding's last row.

        Not vLLM's own bound, the larger of this and the tokenizer's largest id (that admits multimodal placeholder
        ids): a text model's embedding gathers the id, and on a GPU an id past its rows is a device-side assert that
        kills the engine (seen with the DeepSeek-V4 shape's 129,280 rows beside the Qwen tokenizer's 151,669 ids)."""
        return self.vocab_size - 1


def read_model_facts(vllm_config: Any, tokenizer: Any) -> ModelFacts:
    model_config = vllm_config.model_config
    engine_max_logprobs = model_config.max_logprobs
    max_logprobs = MAX_LOGPROBS if engine_max_logprobs < 0 else min(MAX_LOGPROBS, engine_max_logprobs)
    served_name = model_config.served_model_name
    if isinstance(served_name, (list, tuple)):
        served_name = served_name[0]
    return ModelFacts(
        served_model_name=str(served_name),
        model_path=str(model_config.model),
        max_model_len=int(model_config.max_model_len),
        vocab_size=int(model_config.get_vocab_size()),
        tokenizer_max_token_id=int(tokenizer.max_token_id),
        eos_token_id=int(tokenizer.eos_token_id),
        bos_token_id=None if tokenizer.bos_token_id is None else int(tokenizer.bos_token_id),
        dtype=str(model_config.dtype).removeprefix("torch."),
        max_logprobs=max_logprobs,
        tensor_parallel_size=int(vllm_config.parallel_config.tensor_parallel_size),
        has_chat_template=getattr(tokenizer, "chat_template", None) is not None,
        hidden_size=int(model_config.get_hidden_size()),
        max_num_batched_tokens=int(vllm_config.scheduler_config.max_num_batched_tokens),
        max_num_seqs=int(vllm_config.scheduler_config.max_num_seqs),
        poc_batch_cap=poc_batch_cap(
            async_scheduling=bool(vllm_config.scheduler_config.async_scheduling),
            tensor_parallel_size=int(vllm_config.parallel_config.tensor_parallel_size),
            cuda=current_platform.is_cuda(),
        ),
        sampling_defaults=_sampling_defaults(model_config.get_diff_sampling_param()),
    )


def _sampling_defaults(model_defaults: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    return tuple(
        (name, model_defaults[name]) for name in SAMPLING_DEFAULT_NAMES if model_defaults.get(name) is not None
    )
