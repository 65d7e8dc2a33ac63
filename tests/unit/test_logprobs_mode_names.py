"""The logprobs modes are named once (engine_ext.consensus.logprobs_mode.LogprobsMode, valued as vLLM's own
`logprobs_mode` strings); the server's flag and the HTTP body take that vocabulary, not their own."""

from __future__ import annotations

import pytest

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE, LogprobsMode
from server.http.openai_models import CompletionBody
from server.options import DEFAULT_LOGPROBS_MODE, LOGPROBS_MODES


def test_the_flag_names_every_mode_by_its_member_lower_cased() -> None:
    assert sorted(LOGPROBS_MODES) == sorted(mode.name.lower() for mode in LogprobsMode)
    assert LogprobsMode[DEFAULT_LOGPROBS_MODE.upper()] is DEFAULT_MODE


def test_the_modes_are_vllms_names() -> None:
    assert [mode.value for mode in LogprobsMode] == ["raw_logprobs", "processed_logprobs"]


@pytest.mark.parametrize("mode", list(LogprobsMode))
def test_the_http_body_takes_vllms_names(mode: LogprobsMode) -> None:
    body = CompletionBody.model_validate_json(f'{{"prompt": "x", "logprobs_mode": "{mode.value}"}}')
    assert body.logprobs_mode is mode


def test_the_http_body_refuses_another_name_listing_vllms() -> None:
    with pytest.raises(ValueError, match="'raw_logprobs' or 'processed_logprobs'"):
        CompletionBody.model_validate_json('{"prompt": "x", "logprobs_mode": "raw"}')
