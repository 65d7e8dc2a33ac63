"""Runs the CLI's PoC commands (parsed by poc_arguments) against a connected client.

Output for scripts (--json): statuses in proto JSON (cli_io.message_json); artifacts as one
{"nonce", "vector_b64"} object per line (what validate-poc reads back).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from gonka.mlnode.client.artifacts import batch_b64
from gonka.mlnode.client.cli_io import message_json, print_message, wants_progress
from gonka.mlnode.client.client import InferenceClient
from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.progress import Progress
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb


def run_poc_command(client: InferenceClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The command's exit status; a failed call raises ServerError (the caller reports it)."""
    if args.command == "round":
        return _round(client, args, out)
    if args.command == "subscribe":
        return _subscribe(client, args, out, err)
    if args.command == "compute":
        return _compute(client, args, out, err)
    return _validate(client, args, out, err)


def _artifact_params(client: InferenceClient, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "block_hash": args.block_hash,
        "public_key": args.public_key,
        # The served model by default: asking the node beats making every caller look its name up.
        "model": args.model or client.model_info().served_model_name,
        "seq_len": args.seq_len,
        "k_dim": args.k_dim,
        "batch_size": args.batch_size,
        "stronger_rng": args.stronger_rng,
    }


def _round(client: InferenceClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.round_action == "start":
        status = client.poc.start_round(
            **_artifact_params(client, args),
            block_height=args.block_height,
            node_id=args.node_id,
            node_count=args.node_count,
            group_id=args.group_id,
            group_count=args.group_count,
            callback_url=args.callback_url,
            timeout=args.timeout,
        )
    elif args.round_action == "stop":
        status = client.poc.stop_round(args.round_id, timeout=args.timeout)
    else:
        status = client.poc.round_status(args.round_id, timeout=args.timeout)
    print_message(status, args.json, out)
    return 0


def _write_artifacts(batch: poc_pb2.ArtifactBatch, as_json: bool, out: TextIO) -> None:
    for nonce, text in batch_b64(batch):
        out.write(json.dumps({"nonce": nonce, "vector_b64": text}) + "\n" if as_json else f"{nonce}\t{text}\n")


def _subscribe(client: InferenceClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    progress = Progress(err, enabled=wants_progress(args))
    batches = artifacts = 0

    def report_retry(error: ServerError, attempt: int) -> None:
        progress.clear()
        print(f"connection dropped ({error.message}); resuming, attempt {attempt} of {args.max_retries}", file=err)

    def counts(round_id: str) -> str:
        return f"round {round_id[:8]}: {batches} batches, {artifacts} artifacts, {progress.rate(artifacts):.1f} artifacts/s"

    events = client.poc.follow_artifacts(
        args.round_id, args.after_sequence, max_retries=args.max_retries, on_retry=report_retry
    )
    end: poc_pb2.SubscriptionEnd | None = None
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "batch":
            batch = event.batch
            batches += 1
            artifacts += len(batch.nonces)
            progress.clear()
            if args.json:
                _write_artifacts(batch, True, out)
            else:
                out.write(
                    f"batch {batch.sequence}: {len(batch.nonces)} artifacts, nonces {batch.nonces[0]}..{batch.nonces[-1]}\n"
                )
            out.flush()
            progress.show(counts(event.round_id))
        elif kind == "lost":
            lost = event.lost
            progress.clear()
            print(
                f"lost batches {lost.first_missing_sequence}..{lost.last_missing_sequence} ({lost.batches} batches, "
                f"{lost.artifacts} artifacts): they had left the server's buffer",
                file=err,
            )
        else:
            end = event.end
            progress.show(counts(event.round_id), final=True)
            reason = poc_pb2.SubscriptionEndReason.Name(end.reason).removeprefix("SUBSCRIPTION_END_REASON_").lower()
            print(
                f"end: {reason} at sequence {end.last_sequence}" + (f": {end.detail}" if end.detail else ""), file=err
            )
    # follow_artifacts ends with the SubscriptionEnd or raises; only a stopped round is a success.
    return 0 if end is not None and end.reason == poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED else 1


def _compute(client: InferenceClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    nonces = [nonce for group in args.nonces for nonce in group]
    progress = Progress(err, enabled=wants_progress(args))
    done = 0
    for batch in client.poc.compute_artifacts(nonces=nonces, timeout=args.timeout, **_artifact_params(client, args)):
        done += len(batch.nonces)
        progress.clear()
        _write_artifacts(batch, args.json, out)
        out.flush()
        progress.show(
            f"compute: {done}/{len(nonces)} artifacts, {progress.rate(done):.1f} artifacts/s", final=done == len(nonces)
        )
    return 0


def _validate(client: InferenceClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    progress = Progress(err, enabled=wants_progress(args))
    total = len(args.claims)
    responses = client.poc.validate_poc_artifacts(
        claims=args.claims,
        dist_threshold=args.dist_threshold,
        p_mismatch=args.p_mismatch,
        p_value_threshold=args.p_value_threshold,
        block_height=args.block_height,
        node_id=args.node_id,
        callback_url=args.callback_url,
        request_id=args.request_id,
        timeout=args.timeout,
        **_artifact_params(client, args),
    )
    for response in responses:
        if response.HasField("progress"):
            step = response.progress
            progress.show(
                f"validate-poc: {step.nonces_checked}/{total} checked, {step.mismatches_so_far} mismatches, "
                f"{progress.rate(step.nonces_checked):.1f} nonces/s",
                final=step.nonces_checked == total,
            )
        else:
            _print_summary(response.summary, args.json, out)
    return 0


def _print_summary(summary: vpb.PocValidationSummary, as_json: bool, out: TextIO) -> None:
    if as_json:
        print(message_json(summary), file=out)
        return
    verdict = "FRAUD DETECTED" if summary.fraud_detected else "no fraud detected"
    print(
        f"{verdict}: {summary.n_mismatch} of {summary.n_total} claims mismatch, p-value {summary.p_value:.6g}", file=out
    )
    if summary.mismatch_nonces:
        print("mismatching nonces: " + " ".join(str(nonce) for nonce in summary.mismatch_nonces), file=out)
