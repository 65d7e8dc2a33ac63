"""benchmarks/serving/charts.py on the documents the benchmarks wrote (docs/benchmarks/: two H200 PoC runs, a serving run on
this project's CPU): what each chart reads and draws, the PNG, the command line, and a host without matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy
import pytest
from matplotlib.patches import Rectangle
from PIL import Image

from benchmarks.serving.charts import DPI, ChartError, chart_beside, draw_poc, draw_serving, poc_shapes, serving_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = REPO_ROOT / "docs" / "benchmarks"
POC_8B = DATA / "poc-qwen3-8b-shape.json"
POC_MOE = DATA / "poc-qwen3-30b-a3b-shape.json"
SERVING = DATA / "serving-cpu-0.25.1.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def document(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def run_python(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_poc_shapes_are_the_medians_and_cycles_per_minute() -> None:
    (shape,) = poc_shapes(document(POC_8B), {"1024x32": 2197})
    assert shape.shape == "1024x32"
    assert shape.mining_per_min == pytest.approx(60 * 42.49674811191651)
    assert shape.mining_cycles_per_min == pytest.approx((60 * 42.49903476180165, 60 * 42.49446146203137))
    assert shape.prefill_per_min == pytest.approx(60 * 42.161610384953846)
    assert shape.ratio == pytest.approx(1.0079513731908207)
    assert shape.anchor_per_min == 2197


def test_the_anchor_comes_from_the_document_unless_given() -> None:
    results = document(POC_MOE) | {"anchors_nonces_per_min": {"1024x32": 3575.0, "256x32": 1.0}}
    assert [shape.anchor_per_min for shape in poc_shapes(results, {})] == [3575.0]
    assert [shape.anchor_per_min for shape in poc_shapes(results, {"1024x32": 3600.0})] == [3600.0]
    assert [shape.anchor_per_min for shape in poc_shapes(document(POC_MOE), {})] == [None]


def test_the_poc_chart_draws_mining_prefill_and_anchor_bars() -> None:
    shapes = poc_shapes(document(POC_MOE), {"1024x32": 3575})
    axes = draw_poc(shapes, "Qwen3-30B-A3B shape").axes[0]
    heights = [bar.get_height() for bar in axes.patches if isinstance(bar, Rectangle)]
    assert heights == pytest.approx([60 * 74.48664807483249, 60 * 62.7109708581913, 3575])
    texts = [text.get_text() for text in axes.texts]
    assert "4,469" in texts and "3,763" in texts and "3,575" in texts
    assert "mining / prefill 1.188\n1.250x the anchor" in texts
    # Without an anchor there is no third bar.
    assert len(draw_poc(poc_shapes(document(POC_MOE), {}), "t").axes[0].patches) == 2


def test_serving_lines_follow_each_configuration_across_concurrencies() -> None:
    run = document(SERVING)
    lines = {line.label: line for line in serving_lines(run)}
    assert set(lines) == {
        "ours, logprobs top-5",
        "ours, logprobs none",
        "openai, logprobs top-5",
        "offline, logprobs top-5",
    }
    for line in lines.values():
        assert line.streams == (1, 16, 64)
    ours = lines["ours, logprobs top-5"]
    summaries = [s for s in run["summaries"] if s["server"] == "ours" and s["logprobs"]]
    assert ours.tokens_per_second == tuple(
        s["tokens_per_second"] for s in sorted(summaries, key=lambda s: s["streams"])
    )
    assert all(ttft is not None for ttft in ours.ttft_p50_ms)
    # LLM.generate returns every token at the end of its call: no time to first token.
    assert lines["offline, logprobs top-5"].ttft_p50_ms == (None, None, None)


def test_the_serving_chart_draws_tokens_per_second_and_ttft_lines() -> None:
    lines = serving_lines(document(SERVING))
    throughput, ttft = draw_serving(lines, "caption").axes
    assert [line.get_label() for line in throughput.get_lines()] == [line.label for line in lines]
    drawn = [tuple(numpy.asarray(line.get_ydata(), dtype=float).tolist()) for line in throughput.get_lines()]
    assert drawn == [line.tokens_per_second for line in lines]
    timed = [line for line in lines if line.ttft_p50_ms[0] is not None]
    assert len(ttft.get_lines()) == 2 * len(timed)  # p50 and p99 of each, none for offline
    assert ttft.get_yscale() == "log" and list(throughput.get_xticks()) == [1, 16, 64]


def test_chart_beside_writes_a_png_next_to_the_document(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    saved.write_text(SERVING.read_text())
    assert chart_beside("serving", saved) == f"chart written to {tmp_path / 'run.png'}"
    png = (tmp_path / "run.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    with Image.open(tmp_path / "run.png") as image:
        assert image.size == (11 * DPI, int(4.8 * DPI))


def test_a_document_of_another_benchmark_gets_no_chart(tmp_path: Path) -> None:
    saved = tmp_path / "serving.json"
    saved.write_text(SERVING.read_text())
    assert (
        chart_beside("poc", saved) == "no chart written: not a PoC benchmark result with measured shapes (no 'shapes')"
    )
    with pytest.raises(ChartError):
        serving_lines(document(POC_8B))
    assert not (tmp_path / "serving.png").exists()


def test_the_command_line_redraws_a_saved_document(tmp_path: Path) -> None:
    out = tmp_path / "poc.png"
    # Run as a script from elsewhere: it finds the repository's modules itself.
    done = run_python(
        str(REPO_ROOT / "benchmarks" / "serving" / "charts.py"),
        "poc",
        str(POC_8B),
        "--out",
        str(out),
        "--anchor",
        "1024x32=2197",
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"chart written to {out}"), done.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    refused = run_python("benchmarks/serving/charts.py", "serving", str(POC_8B), "--out", str(tmp_path / "x.png"))
    assert refused.returncode == 1 and "not a serving benchmark result" in refused.stderr
    bad_anchor = run_python("benchmarks/serving/charts.py", "poc", str(POC_8B), "--anchor", "1024x32")
    assert bad_anchor.returncode == 2 and "SHAPE=NONCES_PER_MIN" in bad_anchor.stderr


def test_without_matplotlib_the_benchmark_is_told_that_no_chart_was_written(tmp_path: Path) -> None:
    # A None entry in sys.modules makes `import matplotlib` fail as on a host without it (ModuleNotFoundError).
    saved = tmp_path / "poc.json"
    saved.write_text(POC_8B.read_text())
    script = (
        "import sys; from pathlib import Path; sys.modules['matplotlib'] = None; "
        "from benchmarks.serving.charts import chart_beside; "
        f"print(chart_beside('poc', Path({str(saved)!r})))"
    )
    done = run_python("-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no chart written: matplotlib is not installed (it comes with requirements/dev.txt)"
    assert not (tmp_path / "poc.png").exists()
    command_line = (
        "import sys, runpy; sys.modules['matplotlib'] = None; "
        f"sys.argv = ['charts.py', 'poc', {str(saved)!r}]; runpy.run_path('benchmarks/serving/charts.py', run_name='__main__')"
    )
    cli = run_python("-c", command_line)
    assert cli.returncode == 1 and "no chart written: matplotlib is not installed" in cli.stderr
