"""Tokenization stall benchmark: do running streams keep flowing while one maximal text prompt is tokenized?

It starts this server (`python -m server`, the embedded model), runs --streams concurrent streamed
Generate calls (token-id input, --max-tokens tokens each, ignore_eos, temperature 0) and, once they
are flowing, sends one text prompt exactly as long as the server's bound (GetModelInfo's
max_prompt_chars): random words from a seeded RNG. The server tokenizes it on a worker thread and
then (at the default bound and above) answers INVALID_ARGUMENT CONTEXT_LENGTH_EXCEEDED, which is
expected. Every message of every stream is timestamped on arrival.

Printed: how long the big prompt's RPC took and how it ended; the largest gap between consecutive
messages of any stream during the window from sending the big prompt until its RPC returned, and the
same in an equal window right after it without the big prompt (the baseline: one engine step is a
gap too); this load generator's own largest event-loop delay in each window, so that a gap it caused
itself is not blamed on the server. Goal line: largest gap with the big prompt at most 100 ms. It
prints figures and asserts nothing about speed.

Run it at two sizes, from the repository root:

    .venv/bin/python benchmarks/tokenization_stall_bench.py        # the server's default bound
    .venv/bin/python benchmarks/tokenization_stall_bench.py --max-prompt-chars 10000000 --max-request-mb 64

--max-prompt-chars and --max-request-mb are passed to the server as they are; unset, the server's
defaults apply (16 characters per token of the model's context; 16 MiB).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Run as a script, only benchmarks/ is on the path; tests/support (the server launcher, not an
# installed package) and benchmarks.serving are found from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serving.settings import machine_description, progress
from gonka.mlnode.client import AsyncInferenceClient, ServerError, build_request
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import engine_environment, start_server

GOAL_MS = 100.0
# Any ids in the vocabulary do: the streams' prompt only has to be short and the same for all.
STREAM_PROMPT_IDS = (9707, 1879, 11, 419, 374, 264, 1273)
# Steady decoding before the window opens: past the prefill step and the first messages.
SETTLE_SECONDS = 1.0
# After a window closes, time for every stream's next message: a gap that spans the window's end counts.
TAIL_SECONDS = 0.5
LOOP_TICK_SECONDS = 0.005
RPC_TIMEOUT_SECONDS = 900.0
STOP_TIMEOUT_SECONDS = 30.0
# Plain English words, for text that tokenizes like prose (not one repeated character).
WORDS = (
    "the of and to in is was that for it with as on be at by this had not are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three engine model token stream server "
    "prompt batch cache sampling request window kernel memory thread"
).split()


@dataclass
class StreamLog:
    """Arrival times (perf_counter) of one stream's messages."""

    arrivals: list[float] = field(default_factory=list)
    finished: bool = False


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Gap:
    milliseconds: float
    stream: int
    starts_after_window_start_ms: float  # negative: the gap began before the window


@dataclass(frozen=True)
class WindowFigures:
    gap: Gap | None
    messages: int
    load_generator_delay_ms: float


def maximal_prompt(chars: int, seed: int) -> str:
    """Exactly `chars` characters of sentences made of random words (the last word may be cut)."""
    rng = random.Random(seed)
    sentences: list[str] = []
    length = 0
    while length < chars:
        words = rng.choices(WORDS, k=rng.randint(6, 20))
        sentence = " ".join(words).capitalize() + rng.choice((". ", ". ", ", ", "? ", ".\n"))
        sentences.append(sentence)
        length += len(sentence)
    return "".join(sentences)[:chars]


def largest_gap(logs: Sequence[StreamLog], window: Window) -> Gap | None:
    """The longest interval between two consecutive messages of one stream that overlaps the window."""
    largest: Gap | None = None
    for stream, log in enumerate(logs):
        for earlier, later in zip(log.arrivals, log.arrivals[1:]):
            if later <= window.start or earlier >= window.end:
                continue
            gap_ms = (later - earlier) * 1000
            if largest is None or gap_ms > largest.milliseconds:
                largest = Gap(gap_ms, stream, (earlier - window.start) * 1000)
    return largest


def messages_in(logs: Sequence[StreamLog], window: Window) -> int:
    return sum(window.start <= arrival <= window.end for log in logs for arrival in log.arrivals)


class LoopDelays:
    """This process's own event-loop delays: how late a short sleep wakes up, timestamped."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (woke at, seconds late)

    async def watch(self) -> None:
        while True:
            asked = time.perf_counter() + LOOP_TICK_SECONDS
            await asyncio.sleep(LOOP_TICK_SECONDS)
            woke = time.perf_counter()
            self.samples.append((woke, woke - asked))

    def largest_ms(self, window: Window) -> float:
        return 1000 * max((late for woke, late in self.samples if window.start <= woke <= window.end), default=0.0)


async def follow(client: AsyncInferenceClient, request: pb.GenerateRequest, log: StreamLog) -> None:
    async for response in client.stream(request, timeout=RPC_TIMEOUT_SECONDS):
        log.arrivals.append(time.perf_counter())
        log.finished = response.HasField("finish")


async def until_flowing(logs: Sequence[StreamLog], tasks: Sequence[asyncio.Task[None]]) -> None:
    """Every stream past its first messages, then SETTLE_SECONDS more of steady decoding."""
    while any(len(log.arrivals) < 2 for log in logs):
        failed = [task for task in tasks if task.done()]
        if failed:
            failed[0].result()  # raises the stream's error
            raise RuntimeError("a stream ended before it was flowing")
        await asyncio.sleep(0.05)
    await asyncio.sleep(SETTLE_SECONDS)


@dataclass(frozen=True)
class BigPromptOutcome:
    seconds: float
    answer: str


async def send_big_prompt(client: AsyncInferenceClient, request: pb.GenerateRequest) -> tuple[Window, BigPromptOutcome]:
    started = time.perf_counter()
    try:
        generation = await client.generate(request, timeout=RPC_TIMEOUT_SECONDS)
        answer = f"OK, {len(generation.first.token_ids)} token(s) generated (the prompt fitted the context)"
    except ServerError as error:
        answer = f"{error.code.name} {error.reason or '(no reason)'}"
    ended = time.perf_counter()
    return Window(started, ended), BigPromptOutcome(ended - started, answer)


def window_figures(logs: Sequence[StreamLog], delays: LoopDelays, window: Window) -> WindowFigures:
    return WindowFigures(largest_gap(logs, window), messages_in(logs, window), delays.largest_ms(window))


def require_streams_alive(logs: Sequence[StreamLog], tasks: Sequence[asyncio.Task[None]], until: float) -> None:
    """A stream that failed, or finished before `until`, left gaps unmeasured."""
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise RuntimeError(f"a stream failed: {task.exception()}")
    ended = [index for index, log in enumerate(logs) if log.finished and log.arrivals[-1] < until]
    if ended:
        raise RuntimeError(f"stream(s) {ended} finished before the baseline window closed: raise --max-tokens")


@dataclass(frozen=True)
class Measurement:
    model_info: pb.GetModelInfoResponse
    prompt_chars: int
    prompt_bytes: int
    outcome: BigPromptOutcome
    with_prompt: WindowFigures
    baseline: WindowFigures


async def measure(target: str, args: argparse.Namespace) -> Measurement:
    async with AsyncInferenceClient(target) as streams_client, AsyncInferenceClient(target) as prompt_client:
        info = await prompt_client.model_info()
        if not info.max_prompt_chars:
            raise RuntimeError("GetModelInfo reports no max_prompt_chars: this server predates the prompt bound")
        text = maximal_prompt(info.max_prompt_chars, args.seed)
        prompt_bytes = len(text.encode())
        if info.max_request_bytes and prompt_bytes >= info.max_request_bytes:
            raise RuntimeError(
                f"a {prompt_bytes}-byte prompt does not fit the server's {info.max_request_bytes}-byte requests: raise --max-request-mb"
            )
        # Built before the window: only sending it belongs to what is measured.
        big_request = build_request(prompt=text, max_tokens=1, temperature=0.0)

        logs = [StreamLog() for _ in range(args.streams)]
        stream_request = build_request(
            token_ids=STREAM_PROMPT_IDS, max_tokens=args.max_tokens, ignore_eos=True, temperature=0.0
        )
        tasks = [asyncio.create_task(follow(streams_client, stream_request, log)) for log in logs]
        delays = LoopDelays()
        watcher = asyncio.create_task(delays.watch())
        try:
            await until_flowing(logs, tasks)
            progress(f"{args.streams} streams flowing; sending the {len(text)}-character prompt")
            big_window, outcome = await send_big_prompt(prompt_client, big_request)
            progress(f"big prompt answered after {outcome.seconds:.2f}s: {outcome.answer}; baseline window next")
            await asyncio.sleep(SETTLE_SECONDS)
            baseline_start = time.perf_counter()
            baseline_window = Window(baseline_start, baseline_start + big_window.seconds)
            await asyncio.sleep(baseline_window.seconds + TAIL_SECONDS)
            require_streams_alive(logs, tasks, baseline_window.end + TAIL_SECONDS)
        finally:
            for task in (*tasks, watcher):
                task.cancel()
            await asyncio.gather(*tasks, watcher, return_exceptions=True)
    return Measurement(
        info,
        len(text),
        prompt_bytes,
        outcome,
        window_figures(logs, delays, big_window),
        window_figures(logs, delays, baseline_window),
    )


def gap_cell(gap: Gap | None) -> str:
    if gap is None:
        return "-"
    return f"{gap.milliseconds:.1f} ms (stream {gap.stream}, from {gap.starts_after_window_start_ms:+.0f} ms)"


def report(measurement: Measurement, args: argparse.Namespace, server_flags: Sequence[str], seconds: float) -> str:
    machine = machine_description()
    info = measurement.model_info
    bound_source = "--max-prompt-chars" if args.max_prompt_chars else "the server's default"
    rows = (("with the big prompt", measurement.with_prompt), ("baseline, right after", measurement.baseline))
    gap = measurement.with_prompt.gap
    verdict = "n/a (no message in the window)" if gap is None else ("met" if gap.milliseconds <= GOAL_MS else "NOT met")
    lines = [
        "## Tokenization stall benchmark",
        "",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), {machine['memory_gib']} GiB",
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- server: {shlex.join(['python', '-m', 'server', *server_flags])}; model {info.model_path}, {info.max_context_length}-token context",
        f"- prompt bound: {info.max_prompt_chars} characters ({bound_source}); largest request {info.max_request_bytes} bytes",
        (
            f"- streams: {args.streams} streamed Generate calls, token-id input ({len(STREAM_PROMPT_IDS)} tokens), "
            f"max_tokens {args.max_tokens}, ignore_eos, temperature 0; timed from {SETTLE_SECONDS:.0f} s after every "
            "stream had its first messages"
        ),
        (
            f"- big prompt: {measurement.prompt_chars} characters ({measurement.prompt_bytes} bytes) of random words "
            f"(seed {args.seed}), sent on its own channel"
        ),
        f"- big prompt's RPC: {measurement.outcome.seconds:.3f} s, answered {measurement.outcome.answer}",
        f"- baseline: a window as long, opened {SETTLE_SECONDS:.0f} s after the big prompt's answer",
        f"- whole run: {seconds:.0f} s",
        "",
        "| window | length s | messages | largest gap (stream, its start from the window's) | load-generator loop delay ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, figures in rows:
        lines.append(
            f"| {name} | {measurement.outcome.seconds:.3f} | {figures.messages} | {gap_cell(figures.gap)} | "
            f"{figures.load_generator_delay_ms:.1f} |"
        )
    lines += [
        "",
        (
            f"- largest gap between two messages of a stream while the big prompt was in flight: "
            f"{gap_cell(gap)}; goal ≤ {GOAL_MS:.0f} ms: {verdict}"
        ),
    ]
    return "\n".join(lines)


def server_flags(args: argparse.Namespace) -> list[str]:
    flags = []
    if args.max_prompt_chars:
        flags += ["--max-prompt-chars", str(args.max_prompt_chars)]
    if args.max_request_mb:
        flags += ["--max-request-mb", str(args.max_request_mb)]
    return flags


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-prompt-chars", type=int, help="passed to the server (default: the server's own)")
    parser.add_argument("--max-request-mb", type=int, help="passed to the server (default: the server's own)")
    parser.add_argument("--streams", type=int, default=16, help="concurrent streams (default: %(default)s)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=8000,
        help="tokens per stream; they must outlast both windows (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the big prompt's words (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.streams < 1 or args.max_tokens < 2:
        parser.error("--streams must be positive and --max-tokens at least 2")
    if any(value is not None and value < 1 for value in (args.max_prompt_chars, args.max_request_mb)):
        parser.error("--max-prompt-chars and --max-request-mb must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log_path = Path(tempfile.mkdtemp(prefix="tokenization-stall-bench-")) / "server.log"
    flags = server_flags(args)
    progress(f"starting {shlex.join(['python', '-m', 'server', *flags])} (log: {log_path})")
    try:
        server = start_server(log_path, flags, env=engine_environment())
    except (RuntimeError, TimeoutError) as error:
        progress(f"FAILED: the server did not start:\n{error}")
        return 1
    try:
        measurement = asyncio.run(measure(server.target, args))
    except (RuntimeError, ServerError) as error:
        progress(f"FAILED: {error}\n--- last lines of {log_path} ---\n{server.log_tail(40)}")
        return 1
    finally:
        server.stop(timeout=STOP_TIMEOUT_SECONDS)
    print(report(measurement, args, flags, time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
