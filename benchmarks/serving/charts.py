"""Charts of the benchmarks' results: a PNG drawn from the JSON document a benchmark writes.

  poc      benchmarks/poc_bench.py: per shape (seq_len x batch), PoC mining in nonces/min beside vLLM's prefill of
           the same tokens (sequences/min) and, where known, the anchor (the deployed fork's nonces/min)
  serving  benchmarks/serving_bench.py: tokens/s and time to first token against concurrency, one line per
           configuration

The benchmarks call chart_beside() after writing their JSON (--json F.json gives F.png). matplotlib is a development
dependency (requirements/dev.txt), imported only when a chart is drawn: a host without it (an offline GPU host)
still runs the benchmark and is told that no chart was written. Drawing uses the Agg canvas and never a display.

Redraw a chart from a saved document, from the repository root:

    .venv/bin/python benchmarks/serving/charts.py poc F.json [--out F.png] [--title T] [--anchor 1024x32=2197]
    .venv/bin/python benchmarks/serving/charts.py serving F.json [--out F.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serving.measurement import Summary
from benchmarks.serving.settings import logprobs_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 110
NO_MATPLOTLIB = "matplotlib is not installed (it comes with requirements/dev.txt)"


class ChartError(ValueError):
    """The document is not what the chart reads (another benchmark's, or nothing measured)."""


@dataclass(frozen=True)
class PocShape:
    """One shape's figures per minute: the medians over the cycles, and each cycle's."""

    shape: str
    mining_per_min: float
    mining_cycles_per_min: tuple[float, ...]
    prefill_per_min: float
    prefill_cycles_per_min: tuple[float, ...]
    ratio: float  # the median of the cycles' mining / prefill ratios, as the benchmark reports it
    anchor_per_min: float | None


def poc_shapes(results: Mapping[str, Any], anchors: Mapping[str, float]) -> list[PocShape]:
    """`anchors` (shape -> nonces/min) add to, and override, the document's own anchors_nonces_per_min."""
    if not results.get("shapes"):
        raise ChartError("not a PoC benchmark result with measured shapes (no 'shapes')")
    known = {**results.get("anchors_nonces_per_min", {}), **anchors}
    shapes = []
    for shape, entry in results["shapes"].items():
        cycles = entry["cycles"]
        shapes.append(
            PocShape(
                shape=shape,
                mining_per_min=60 * entry["median"]["mining_nonces_per_s"],
                mining_cycles_per_min=tuple(60 * cycle["mining_nonces_per_s"] for cycle in cycles),
                prefill_per_min=60 * entry["median"]["reference_seq_per_s"],
                prefill_cycles_per_min=tuple(60 * cycle["reference_seq_per_s"] for cycle in cycles),
                ratio=entry["median"]["ratio"],
                anchor_per_min=known.get(shape),
            )
        )
    return shapes


@dataclass(frozen=True)
class ServingLine:
    """One configuration across the concurrencies it ran at, lowest first."""

    label: str
    streams: tuple[int, ...]
    tokens_per_second: tuple[float, ...]
    ttft_p50_ms: tuple[float | None, ...]
    ttft_p99_ms: tuple[float | None, ...]


def serving_lines(document: Mapping[str, Any]) -> list[ServingLine]:
    """In the run's order of configurations."""
    if not document.get("summaries"):
        raise ChartError("not a serving benchmark result with measured rounds (no 'summaries')")
    groups: dict[str, list[Summary]] = {}
    for entry in document["summaries"]:
        summary = Summary(**entry)
        groups.setdefault(f"{summary.server}, logprobs {logprobs_label(summary.logprobs)}", []).append(summary)
    lines = []
    for label, summaries in groups.items():
        ordered = sorted(summaries, key=lambda summary: summary.streams)
        lines.append(
            ServingLine(
                label=label,
                streams=tuple(s.streams for s in ordered),
                tokens_per_second=tuple(s.tokens_per_second for s in ordered),
                ttft_p50_ms=tuple(s.ttft_p50_ms for s in ordered),
                ttft_p99_ms=tuple(s.ttft_p99_ms for s in ordered),
            )
        )
    return lines


def serving_caption(document: Mapping[str, Any]) -> str:
    """What was served, how, and where: the subtitle."""
    machine = document.get("machine", {})
    parts = [
        (
            f"{Path(document.get('model', 'model')).name}, {document.get('tokens_per_stream', '?')} tokens per stream, "
            f"{document.get('repeats', '?')} cycles ({document.get('layout', 'side by side')})"
        ),
        f"{machine.get('cpu', 'unknown CPU')}, {machine.get('usable_cores', '?')} cores; {machine.get('vllm', 'unknown vLLM')}",
    ]
    if "date_utc" in document:
        parts[-1] += f"; {document['date_utc']}"
    return "\n".join(parts)


def new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas: no pyplot, so no display and no global figure state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def per_minute(value: float) -> str:
    return f"{value:,.0f}"


def draw_poc(shapes: Sequence[PocShape], title: str) -> Figure:
    figure = new_figure(max(6.4, 2.2 + 2.4 * len(shapes)), 5.2)
    axes = figure.add_subplot()
    width = 0.26
    series: list[tuple[str, str, Callable[[PocShape], float | None], Callable[[PocShape], tuple[float, ...]]]] = [
        ("PoC mining (nonces/min)", "tab:blue", lambda s: s.mining_per_min, lambda s: s.mining_cycles_per_min),
        (
            "vLLM's prefill of the same tokens (sequences/min)",
            "tab:gray",
            lambda s: s.prefill_per_min,
            lambda s: s.prefill_cycles_per_min,
        ),
        ("anchor: the deployed fork (nonces/min)", "tab:orange", lambda s: s.anchor_per_min, lambda s: ()),
    ]
    if all(shape.anchor_per_min is None for shape in shapes):
        series.pop()
    highest = 0.0
    for index, (label, colour, value_of, cycles_of) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * width
        for position, shape in enumerate(shapes):
            value = value_of(shape)
            if value is None:
                continue
            highest = max(highest, value, *cycles_of(shape))
            bars = axes.bar(position + offset, value, width, color=colour, label=label if position == 0 else None)
            axes.bar_label(bars, labels=[per_minute(value)], padding=2, fontsize=8)
            cycles = cycles_of(shape)
            axes.plot([position + offset] * len(cycles), cycles, "k.", markersize=4)
    for position, shape in enumerate(shapes):
        note = f"mining / prefill {shape.ratio:.3f}"
        if shape.anchor_per_min:
            note += f"\n{shape.mining_per_min / shape.anchor_per_min:.3f}x the anchor"
        axes.annotate(note, (position, highest * 1.08), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(shapes)), [f"seq_len x batch\n{shape.shape}" for shape in shapes])
    axes.set_xlim(-0.6, len(shapes) - 0.4)
    axes.set_ylim(0, highest * 1.3)
    axes.set_ylabel("per minute (medians; dots: cycles)")
    axes.set_title("\n".join(textwrap.fill(line, 75) for line in title.splitlines()), fontsize=10)
    figure.legend(loc="outside lower center", fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    return figure


def draw_serving(lines: Sequence[ServingLine], caption: str) -> Figure:
    figure = new_figure(11, 4.8)
    throughput, ttft = figure.subplots(1, 2)
    concurrencies = sorted({streams for line in lines for streams in line.streams})
    for index, line in enumerate(lines):
        colour = f"C{index}"
        throughput.plot(line.streams, line.tokens_per_second, "o-", color=colour, label=line.label)
        timed = [
            (n, p50, p99)
            for n, p50, p99 in zip(line.streams, line.ttft_p50_ms, line.ttft_p99_ms, strict=True)
            if p50 is not None
        ]
        if timed:
            streams, p50s, p99s = zip(*timed, strict=True)
            ttft.plot(streams, p50s, "o-", color=colour, label=f"{line.label}, p50")
            ttft.plot(streams, p99s, "^--", color=colour, alpha=0.6, label=f"{line.label}, p99")
    for axes, ylabel in ((throughput, "delivered tokens/s (median of cycles)"), (ttft, "time to first token, ms")):
        concurrency_axis(axes, concurrencies)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    throughput.set_ylim(bottom=0)
    ttft.set_yscale("log")
    figure.suptitle(f"Serving benchmark: tokens/s and TTFT against concurrency\n{caption}", fontsize=9)
    return figure


def concurrency_axis(axes: Axes, concurrencies: Sequence[int]) -> None:
    axes.set_xscale("log", base=2)
    axes.set_xticks(concurrencies, [str(n) for n in concurrencies])
    axes.minorticks_off()
    axes.set_xlabel("concurrent streams")


def draw(kind: str, document: Mapping[str, Any], title: str, anchors: Mapping[str, float]) -> Figure:
    if kind == "poc":
        return draw_poc(poc_shapes(document, anchors), f"PoC mining against vLLM's prefill of the same tokens\n{title}")
    if kind == "serving":
        return draw_serving(serving_lines(document), serving_caption(document))
    raise ChartError(f"no chart of kind {kind!r} (poc or serving)")


def write_chart(
    kind: str, json_path: Path, out: Path, title: str | None = None, anchors: Mapping[str, float] | None = None
) -> None:
    document = json.loads(json_path.read_text(encoding="utf-8"))
    if title is None:
        title = Path(document["model"]).name if "model" in document else json_path.stem
    draw(kind, document, title, anchors or {}).savefig(out, format="png")


def matplotlib_missing(error: ModuleNotFoundError) -> bool:
    return error.name is not None and error.name.split(".")[0] == "matplotlib"


def chart_beside(kind: str, json_path: Path) -> str:
    """Draws the saved document's chart into the same name with .png; returns the line to print about it."""
    out = json_path.with_suffix(".png")
    try:
        write_chart(kind, json_path, out)
    except ModuleNotFoundError as error:
        if not matplotlib_missing(error):
            raise
        return f"no chart written: {NO_MATPLOTLIB}"
    except ChartError as error:
        return f"no chart written: {error}"
    return f"chart written to {out}"


def parse_anchor(text: str) -> tuple[str, float]:
    shape, _, value = text.partition("=")
    try:
        return shape.strip().lower(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: SHAPE=NONCES_PER_MIN, e.g. 1024x32=2197") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw a benchmark's chart (PNG) from its saved JSON document.")
    parser.add_argument("kind", choices=("poc", "serving"), help="which benchmark wrote the document")
    parser.add_argument("json", type=Path, help="the document (the benchmark's --json file)")
    parser.add_argument("--out", type=Path, help="the PNG to write (default: beside the document, .png)")
    parser.add_argument("--title", help="poc: what was measured (default: the document's model, else its file name)")
    parser.add_argument(
        "--anchor",
        type=parse_anchor,
        action="append",
        default=[],
        metavar="SHAPE=NONCES_PER_MIN",
        help="poc: the anchor's nonces/min at a shape (repeatable); adds to the document's own",
    )
    args = parser.parse_args(argv)
    out = args.out or args.json.with_suffix(".png")
    try:
        write_chart(args.kind, args.json, out, args.title, dict(args.anchor))
    except ModuleNotFoundError as error:
        if not matplotlib_missing(error):
            raise
        print(f"no chart written: {NO_MATPLOTLIB}", file=sys.stderr)
        return 1
    except ChartError as error:
        print(f"no chart written: {args.json}: {error}", file=sys.stderr)
        return 1
    print(f"chart written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
