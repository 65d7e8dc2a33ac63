"""What vLLM raises for a request it refuses (bad sampling options, a prompt too long...).

ValueError on every release; 0.28 moved its own validation error (VLLMValidationError) under a VLLMClientError, no
longer a ValueError, while other checks still raise ValueError. Read from vllm.exceptions itself rather than from the
release's seam module, so the generation path does not import the seams (which import it).
"""

from __future__ import annotations

import vllm.exceptions


def _request_refusals() -> tuple[type[Exception], ...]:
    client_error: type[Exception] | None = getattr(vllm.exceptions, "VLLMClientError", None)  # 0.28 and later
    return (ValueError,) if client_error is None else (ValueError, client_error)


REQUEST_REFUSALS = _request_refusals()
