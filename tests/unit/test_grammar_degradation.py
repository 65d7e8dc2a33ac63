"""A replayed token that breaks a replay's grammar switches that grammar off for that replay alone (the xgrammar
seam); an ordinary request's grammar stays in force and its rejection is marked for the scheduler to end the
request with an error. On real grammars that vLLM's own xgrammar backend compiles with the embedded model's
tokenizer, created through vLLM's own StructuredOutputManager._create_grammar (which the seam marks replays in)."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm.config import StructuredOutputsConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend, XgrammarGrammar
from vllm.v1.structured_output.utils import choice_as_grammar

from engine_ext.generation.replay_rows import REPLAY_TOKENS_ARG
from engine_ext.seams import expected_seams, installed_seams
from engine_ext.seams.common import (
    GRAMMAR_DISABLED,
    REPLAY_GRAMMARS,
    XGRAMMAR_GRACEFUL_DEGRADATION,
    install_replay_grammars,
    install_xgrammar_graceful_degradation,
)

SEAMS_LOGGER = "engine_ext.seams.common"
BITS_PER_MASK_WORD = 32


@pytest.fixture(scope="module")
def backend(tokenizer: Any, model_dir: Path) -> XgrammarBackend:
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    # The two fields of the engine's config that the backend reads.
    config = SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(backend="xgrammar"), speculative_config=None
    )
    return XgrammarBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)


@pytest.fixture(scope="module")
def token(tokenizer: Any) -> SimpleNamespace:
    """Single-token ids: the grammar's two answers, one it rejects, and the end of sequence."""

    def single(text: str) -> int:
        (token_id,) = tokenizer.encode(text, add_special_tokens=False)
        return token_id

    return SimpleNamespace(yes=single("yes"), no=single("no"), outside=single(" Slow"), eos=tokenizer.eos_token_id)


@pytest.fixture
def seam() -> None:
    install_xgrammar_graceful_degradation()
    install_replay_grammars()


def yes_or_no(backend: XgrammarBackend, replay: bool = True) -> XgrammarGrammar:
    """A request's grammar as vLLM creates it: a replay's (enforced tokens in its sampling parameters), or not."""
    manager = StructuredOutputManager.__new__(StructuredOutputManager)  # only what _create_grammar reads
    manager.backend = backend
    key = (StructuredOutputOptions.GRAMMAR, choice_as_grammar(["yes", "no"]))
    params = SamplingParams(extra_args={REPLAY_TOKENS_ARG: [1, 2]} if replay else None)
    request = SimpleNamespace(
        structured_output_request=SimpleNamespace(structured_output_key=key), sampling_params=params
    )
    return manager._create_grammar(request)


def allows(row: torch.Tensor, token_id: int) -> bool:
    return bool((int(row[token_id // BITS_PER_MASK_WORD]) >> (token_id % BITS_PER_MASK_WORD)) & 1)


def vllms(method: str) -> Callable[..., Any]:
    """XgrammarGrammar's own method, whether or not the seam wrapped it."""
    return inspect.unwrap(getattr(XgrammarGrammar, method))


def test_without_the_seam_a_broken_grammar_keeps_masking_from_its_old_state(
    backend: XgrammarBackend, token: SimpleNamespace
) -> None:
    grammar = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, choice_as_grammar(["yes", "no"]))
    bitmask = backend.allocate_token_bitmask(1)
    vllms("fill_bitmask")(grammar, bitmask, 0)
    before = bitmask[0].clone()
    assert allows(before, token.yes) and allows(before, token.no) and not allows(before, token.outside)

    assert vllms("accept_tokens")(grammar, "replay", [token.outside]) is False  # vLLM's scheduler only warns
    vllms("fill_bitmask")(grammar, bitmask, 0)
    assert torch.equal(bitmask[0], before)  # the next step is still masked as if nothing had been generated


@pytest.mark.usefixtures("seam")
def test_a_rejected_token_switches_off_that_grammar_alone(
    backend: XgrammarBackend, token: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    broken, other = yes_or_no(backend), yes_or_no(backend)
    bitmask = backend.allocate_token_bitmask(2)
    other.fill_bitmask(bitmask, 0)  # the shared buffer's row 0 still holds another request's mask
    constrained = bitmask[0].clone()

    with caplog.at_level(logging.WARNING, logger=SEAMS_LOGGER):
        assert broken.accept_tokens("replay-1", [token.outside]) is True
        assert broken.accept_tokens("replay-1", [token.outside, token.eos]) is True
    assert getattr(broken, GRAMMAR_DISABLED) is True and not getattr(other, GRAMMAR_DISABLED, False)
    warnings = [record.getMessage() for record in caplog.records if record.name == SEAMS_LOGGER]
    assert len(warnings) == 1 and "replay-1" in warnings[0] and str(token.outside) in warnings[0]

    broken.fill_bitmask(bitmask, 0)
    other.fill_bitmask(bitmask, 1)
    assert bool((bitmask[0] == -1).all())  # allow all, not the leftover row
    assert torch.equal(bitmask[1], constrained)  # the neighbour keeps its own mask
    assert not allows(bitmask[1], token.outside)

    processed = broken.num_processed_tokens
    broken.rollback(2)
    assert broken.num_processed_tokens == processed
    assert broken.validate_tokens([token.outside, token.yes, token.outside]) == [
        token.outside,
        token.yes,
        token.outside,
    ]
    assert broken.is_terminated() is False  # even after an EOS: the request ends at its own stop


@pytest.mark.usefixtures("seam")
def test_reset_switches_the_grammar_back_on(backend: XgrammarBackend, token: SimpleNamespace) -> None:
    grammar = yes_or_no(backend)
    bitmask = backend.allocate_token_bitmask(1)
    grammar.fill_bitmask(bitmask, 0)
    initial = bitmask[0].clone()
    grammar.accept_tokens("replay-2", [token.outside])

    grammar.reset()
    grammar.fill_bitmask(bitmask, 0)
    assert torch.equal(bitmask[0], initial)
    assert grammar.accept_tokens("replay-2", [token.no]) is True and not getattr(grammar, GRAMMAR_DISABLED)


@pytest.mark.usefixtures("seam")
def test_a_disabled_grammar_passes_vllms_speculative_bitmask_path(
    backend: XgrammarBackend, token: SimpleNamespace
) -> None:
    """grammar_bitmask asserts that every draft token is accepted, then rolls them all back."""
    grammar = yes_or_no(backend)
    grammar.accept_tokens("replay-3", [token.outside])
    manager = StructuredOutputManager.__new__(StructuredOutputManager)  # only what grammar_bitmask reads
    manager.vllm_config = SimpleNamespace(
        num_speculative_tokens=2,
        scheduler_config=SimpleNamespace(max_num_seqs=1),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    manager.backend, manager._grammar_bitmask = backend, None
    manager.reasoner = manager.reasoner_cls = None  # no reasoning parser
    manager._full_mask = torch.tensor(-1, dtype=torch.int32)
    manager.fill_bitmask_parallel_threshold = 128
    requests = {"replay-3": SimpleNamespace(structured_output_request=SimpleNamespace(grammar=grammar))}

    rows = manager.grammar_bitmask(requests, ["replay-3"], {"replay-3": [token.outside, token.yes]})
    assert rows.shape[0] == 3 and bool((rows == -1).all())


@pytest.mark.usefixtures("seam")
def test_an_ordinary_requests_grammar_stays_in_force_and_rejects(
    backend: XgrammarBackend, token: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    """Not a replay: no degradation. vLLM's answer (False) stands, and vLLM's scheduler ends the request
    with an error."""
    grammar = yes_or_no(backend, replay=False)
    bitmask = backend.allocate_token_bitmask(1)
    grammar.fill_bitmask(bitmask, 0)
    constrained = bitmask[0].clone()
    with caplog.at_level(logging.WARNING, logger=SEAMS_LOGGER):
        assert grammar.accept_tokens("ordinary-1", [token.outside]) is False
    assert not getattr(grammar, GRAMMAR_DISABLED, False)
    assert any(
        "ordinary-1" in record.getMessage() and "ends with an error" in record.getMessage() for record in caplog.records
    )
    grammar.fill_bitmask(bitmask, 0)
    assert torch.equal(bitmask[0], constrained) and not allows(bitmask[0], token.outside)  # still constrained


@pytest.mark.usefixtures("seam")
def test_a_replay_past_its_grammars_end_keeps_running(backend: XgrammarBackend, token: SimpleNamespace) -> None:
    """An executor whose request ran past its grammar's end (min_tokens, ignore_eos) is replayed token for
    token: the terminated grammar must accept what follows, or vLLM ends the replay with an error."""
    grammar = yes_or_no(backend)
    assert grammar.accept_tokens("replay-4", [token.yes, token.eos]) is True
    assert grammar.is_terminated()
    assert grammar.accept_tokens("replay-4", [token.outside]) is True
    assert getattr(grammar, GRAMMAR_DISABLED) is True


@pytest.mark.usefixtures("seam")
def test_the_seams_are_installed_once_and_expected_on_every_platform() -> None:
    wrapped, create = XgrammarGrammar.accept_tokens, StructuredOutputManager._create_grammar
    install_xgrammar_graceful_degradation()
    install_replay_grammars()
    assert XgrammarGrammar.accept_tokens is wrapped and StructuredOutputManager._create_grammar is create
    for name in (XGRAMMAR_GRACEFUL_DEGRADATION, REPLAY_GRAMMARS):
        assert name in installed_seams()
        assert all(name in expected_seams(is_cpu_platform=cpu) for cpu in (True, False))
