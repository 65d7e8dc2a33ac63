"""docs/grafana/mlnode-dashboard.json names only metrics the server exports.

Every PromQL expression in the dashboard (panel queries and template variables) is read for the metric names it
selects, and each name must be a series in a live scrape of a server started with --metrics-port, after traffic that
makes the lazily created series exist: token-stream and text Generate calls, a refused one (the error counter), and a
short PoC round (the rounds-ended counter). A histogram's _bucket/_sum/_count and a counter's _total resolve to their
family through the family's type, as prometheus_client's parser reads the exposition; histogram_quantile must read a
histogram's buckets.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from tests.support.server_process import REPO_ROOT, SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

DASHBOARD = REPO_ROOT / "docs" / "grafana" / "mlnode-dashboard.json"
PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
FIXED_LENGTH = dict(max_tokens=4, ignore_eos=True, temperature=0.0)
SCRAPE_TIMEOUT_SECONDS = 30
ROUND_TIMEOUT_SECONDS = 120

# One PromQL token at a time. Label matchers and ranges are taken whole: they hold label names, values and durations,
# never a metric name (the dashboard selects by name, never by {__name__=...}: checked below).
PROMQL_TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
      | (?P<matchers>\{[^}]*\})
      | (?P<range>\[[^\]]*\])
      | (?P<number>[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[a-z]*)
      | (?P<identifier>[A-Za-z_:][A-Za-z0-9_:]*)
      | (?P<open>\()
      | (?P<close>\))
      | (?P<other>\S)""",
    re.VERBOSE,
)
GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
# Followed by a parenthesised list of label names.
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
)
KEYWORDS = LABEL_LIST_KEYWORDS | AGGREGATIONS | {"bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}
# Grafana's variable query: label_values(SELECTOR, LABEL).
LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.*),\s*(?P<label>\w+)\s*\)\s*$")
SUFFIX_TYPES = {
    "_total": ("counter",),
    "_bucket": ("histogram",),
    "_sum": ("histogram", "summary"),
    "_count": ("histogram", "summary"),
}


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's variables read as a number)."""
    tokens = [
        (match.lastgroup, match.group())
        for match in PROMQL_TOKEN.finditer(GRAFANA_VARIABLE.sub("1", expression))
        if match.lastgroup is not None
    ]
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][0] if index + 1 < len(tokens) else None
        if kind == "identifier" and text.lower() in LABEL_LIST_KEYWORDS and following == "open":
            index = closing_parenthesis(tokens, index + 1)
        elif kind == "identifier" and text.lower() not in KEYWORDS and following != "open":
            names.add(text)
        index += 1
    return names


def closing_parenthesis(tokens: list[tuple[str, str]], opening: int) -> int:
    depth = 0
    for index in range(opening, len(tokens)):
        depth += {"open": 1, "close": -1}.get(tokens[index][0], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in {' '.join(text for _, text in tokens)!r}")


@dataclass(frozen=True)
class Query:
    where: str  # the panel's title, or the variable's name
    expression: str


def dashboard_queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every panel's target expressions (rows' nested panels included) and every query variable's selector."""
    queries = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop(0)
        panels += panel.get("panels", [])
        queries += [Query(f"panel {panel['title']!r}", target["expr"]) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            values = LABEL_VALUES.match(query)
            assert values, f"variable {variable['name']}: not a label_values(SELECTOR, LABEL) query: {query!r}"
            queries.append(Query(f"variable {variable['name']!r}", values["selector"]))
    return queries


def family_of(name: str, families: dict[str, Metric]) -> Metric | None:
    """The family a series name belongs to: itself, or its name less a suffix that the family's type gives it."""
    if name in families:
        return families[name]
    for suffix, types in SUFFIX_TYPES.items():
        family = families.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if family is not None and family.type in types:
            return family
    return None


def unexported(query: Query, families: dict[str, Metric]) -> list[str]:
    """What in one query the scrape does not hold."""
    problems = []
    for name in sorted(metric_names(query.expression)):
        family = family_of(name, families)
        if family is None or name not in {sample.name for sample in family.samples}:
            problems.append(f"{query.where}: {name} is not exported ({query.expression})")
        elif "histogram_quantile" in query.expression and not (name.endswith("_bucket") and family.type == "histogram"):
            problems.append(f"{query.where}: histogram_quantile over {name}, not a histogram's buckets")
    return problems


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[ServerProcess, str]]:
    metrics_port = free_port()
    log_path = tmp_path_factory.mktemp("dashboard") / "server.log"
    server = start_server(log_path, ["--metrics-port", str(metrics_port), *SERVER_LAYER_FLAGS])
    yield server, f"http://127.0.0.1:{metrics_port}"
    exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def drive_traffic(target: str) -> None:
    """Requests on both output paths, one refused request and a short PoC round, so every series exists."""
    with InferenceClient(target) as client:
        client.generate(token_ids=PROMPT_IDS, **FIXED_LENGTH)
        client.generate(prompt="A dashboard, take one:", include_text=True, **FIXED_LENGTH)
        with pytest.raises(ServerError):
            client.generate(token_ids=[1, 2, 151936], max_tokens=4)
        model = client.model_info().served_model_name
    with grpc.insecure_channel(target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        request = poc_pb2.StartRoundRequest(
            params=poc_pb2.PocParams(model=model, seq_len=64),
            batch_size=8,
            block_hash="dashboard-block",
            public_key="dashboard-key",
        )
        poc.StartRound(request)
        try:
            deadline = time.monotonic() + ROUND_TIMEOUT_SECONDS
            while poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.nonces_produced == 0:
                assert time.monotonic() < deadline, f"the round published no nonce in {ROUND_TIMEOUT_SECONDS} s"
                time.sleep(0.1)
        finally:
            poc.StopRound(poc_pb2.StopRoundRequest())


def scraped_families(endpoint: str) -> dict[str, Metric]:
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=SCRAPE_TIMEOUT_SECONDS) as response:
        return {family.name: family for family in text_string_to_metric_families(response.read().decode())}


def test_every_dashboard_query_names_a_metric_the_server_exports(
    metrics_server: tuple[ServerProcess, str], dashboard: dict[str, Any]
) -> None:
    server, endpoint = metrics_server
    drive_traffic(server.target)
    families = scraped_families(endpoint)
    queries = dashboard_queries(dashboard)

    graphs = {f"panel {panel['title']!r}" for panel in dashboard["panels"] if panel["type"] != "row"}
    assert graphs <= {query.where for query in queries}, "a panel's queries were not found"
    assert [problem for query in queries for problem in unexported(query, families)] == []
    # Every part of the exposition an operator needs is read: the engine's, the RPCs', PoC's, the process's.
    named = {name for query in queries for name in metric_names(query.expression)}
    for prefix in ("vllm:", "grpc_server_", "mlnode_poc_callback_", "mlnode_poc_", "mlnode_instance_", "process_"):
        assert any(name.startswith(prefix) for name in named), prefix


def test_promql_names_are_told_from_functions_labels_and_durations() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket{job="$job", '
        'grpc_method=~"Validate.*"}[$__rate_interval])))'
    )
    assert metric_names(expression) == {"grpc_server_handling_seconds_bucket"}
    assert metric_names("sum without (instance) (a:b_total) / on (job) group_left (state) c offset 5m > bool 1") == {
        "a:b_total",
        "c",
    }
    assert metric_names('60 * sum(rate(x_total{reason="by (le)"}[1h:5m])) or vector(0)') == {"x_total"}
    assert metric_names('sum(m{state="serving"}) == 1 unless max by (le) (n) and count(o)') == {"m", "n", "o"}


def test_names_resolve_to_their_family_by_type() -> None:
    exposition = (
        "# TYPE c counter\nc_total 1\n# TYPE h histogram\n"
        'h_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n# TYPE g_count gauge\ng_count 1\n'
    )
    families = {family.name: family for family in text_string_to_metric_families(exposition)}
    for name in ("c_total", "h_bucket", "h_sum", "h_count", "g_count"):
        assert unexported(Query("q", name), families) == [], name
    # A family's own name is no series of a counter or a histogram; a gauge's name takes no histogram suffix.
    for name in ("c", "h", "g", "g_bucket", "h_total"):
        assert unexported(Query("q", name), families) == [f"q: {name} is not exported ({name})"], name
    assert unexported(Query("q", "histogram_quantile(0.5, h_sum)"), families) == [
        "q: histogram_quantile over h_sum, not a histogram's buckets"
    ]


def test_the_dashboard_imports_into_grafana_with_a_prometheus_datasource_variable(dashboard: dict[str, Any]) -> None:
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert dashboard["schemaVersion"] >= 37 and dashboard["id"] is None  # Grafana 10's schema; import assigns ids
    panels = [p for row in dashboard["panels"] for p in (row, *row.get("panels", []))]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert 0 <= panel["gridPos"]["x"] and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            sources = [panel["datasource"], *(target["datasource"] for target in panel["targets"])]
            assert all(source == {"type": "prometheus", "uid": "${datasource}"} for source in sources), panel["title"]
            assert "__name__" not in json.dumps(panel["targets"]), panel["title"]
