"""The Grafana dashboard's PromQL (operations/deploy/grafana-dashboard.json) and the metric names it reads: the manifests' tests
parse every query, and the metrics' tests check each name is one the running service exports."""

from __future__ import annotations

import json
import re
from typing import Any

import promql_parser

from support.paths import ROOT

DASHBOARD = ROOT / "operations" / "deploy" / "grafana-dashboard.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": "bionemo"}
"""Grafana's variables in the queries, replaced by what Grafana would put there before PromQL sees them."""


def dashboard_queries() -> list[str]:
    """The PromQL of every panel's targets, and of the dashboard's query variables, as Prometheus would get it."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [variable["definition"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    for variable, value in GRAFANA_VARIABLES.items():
        queries = [query.replace(variable, value) for query in queries]
    return queries


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query (or a Grafana `label_values(metric, label)`) selects; parsed, not
    pattern-matched."""
    if label_values := re.fullmatch(r"label_values\((\w+), *\w+\)", query):
        return {label_values[1]}
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(query), visit)
    return names
