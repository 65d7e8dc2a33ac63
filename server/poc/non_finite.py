"""The error for a PoC batch the model answered with non-finite values (poc-v2.md section 5)."""

from __future__ import annotations

import grpc

from server.errors import Reason, ServiceError


def non_finite_batch(nonces: list[int], detail: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.INTERNAL,
        Reason.NON_FINITE_BATCH,
        f"the model produced non-finite values for the batch of nonces {nonces[:8]}{'...' if len(nonces) > 8 else ''}: {detail}",
    )
