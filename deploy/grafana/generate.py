"""Grafana as code: the turn-audit dashboard, its Grafana-managed alert rules and their
notification routing, generated from one definition with Grafana's foundation SDK.

    .venv/bin/python deploy/grafana/generate.py            # rewrite the files below
    .venv/bin/python deploy/grafana/generate.py --check    # exit 1 naming each file that differs
    .venv/bin/python deploy/grafana/generate.py --datasource-uid UID --out DIR
        # the alert rules for a Grafana whose Prometheus datasource has another uid

What it writes (under deploy/grafana/ unless --out):

* ``dashboards/turnaudit.json``: the dashboard. Every panel and variable reads the
  datasource ``${DS_PROMETHEUS}``: a datasource variable of that name when the file is
  provisioned (it picks the Grafana's Prometheus datasource, whatever its uid), and the
  ``__inputs`` entry Grafana's import asks for when the file is imported by hand. The
  service variable ``job`` lists the jobs that export turn-audit metrics, whatever the
  scrape configuration calls them.
* ``provisioning/alerting/turnaudit.yml``: one Grafana-managed rule per Prometheus alert of
  ``deploy/prometheus/rules/*.yml`` (same names, conditions, ``for``, labels, descriptions,
  runbooks), each query standing alone: the recording rules an alert reads are written
  into its query, so a Grafana in front of a Prometheus without this project's rules
  still evaluates it. Rules whose silence is the failure (``SILENCE_PAGES``) query a
  value that exists while all is well and page on no data.
* ``provisioning/alerting/notifications.yml``: the contact points and the notification
  policy (``severity=page`` to the page contact point within 10 s, the rest batched to
  tickets), the same routing as deploy/alertmanager/alertmanager.yml.

The Prometheus rule files are the one definition of every alert condition;
``dashboard_panels.py``, ``verify_panels.py`` and ``archive_panels.py`` hold the dashboard's
panels (``panel_spec.py`` what a panel is), ``alert_rules.py`` the rules built from those
files and, per alert, the panel it links to; this script builds and writes. The suite
(tests/unit/deploy/test_grafana_generated.py) regenerates and fails on any difference.
Needs only PyYAML and grafana-foundation-sdk (the project's ``dev`` extra), not turnaudit.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from alert_rules import DEFAULT_DATASOURCE_UID, build_rules
from dashboard_panels import JOB_QUERY, PACK_QUERY, PANELS
from grafana_foundation_sdk.builders import (
    alerting,
    bargauge,
    dashboard,
    prometheus,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    GridPos,
    VariableOption,
    VariableRefresh,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from panel_spec import DASHBOARD_UID, PanelSpec, Target

HERE = Path(__file__).resolve().parent
DASHBOARD_TITLE = "Turn audit: verdicts, integrity, consumers"
# The import input and the dashboard variable of the same name (see the module doc).
DS_INPUT = "DS_PROMETHEUS"
DS = DataSourceRef(type_val="prometheus", uid="${" + DS_INPUT + "}")
GRAFANA_VERSION = "11.1.0"  # the image docker-compose.yml runs
WEBHOOK = "http://alert-webhook:9095"  # the example receiver of docker-compose.yml

OUTPUTS = {
    "dashboard": Path("dashboards/turnaudit.json"),
    "rules": Path("provisioning/alerting/turnaudit.yml"),
    "notifications": Path("provisioning/alerting/notifications.yml"),
}


# -- the dashboard -------------------------------------------------------------------------


def _query(target: Target, ref: str, instant: bool) -> prometheus.Dataquery:
    query = prometheus.Dataquery().ref_id(ref).datasource(DS).expr(target.expr)
    if target.legend:
        query = query.legend_format(target.legend)
    if instant:
        query = query.instant().format(PromQueryFormat.TABLE)
    return query


def _panel(spec: PanelSpec) -> Any:
    x, y, w, h = spec.grid
    builder: Any
    if spec.kind == "table":
        builder = (
            table.Panel()
            .show_header(True)
            .with_transformation(
                DataTransformerConfig(
                    id_val="organize", options={"excludeByName": {"Time": True, "Value": True}}
                )
            )
        )
    elif spec.kind == "bargauge":
        builder = bargauge.Panel()
    else:
        builder = timeseries.Panel().legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.RIGHT)
            .show_legend(True)
        )
    builder = (
        builder.id(spec.id)
        .title(spec.title)
        .datasource(DS)
        .unit(spec.unit)
        .grid_pos(GridPos(h=h, w=w, x=x, y=y))
    )
    if spec.description:
        builder = builder.description(spec.description)
    for ref, target in zip("ABCDEFGH", spec.targets, strict=False):
        builder = builder.with_target(_query(target, ref, spec.kind == "table"))
    return builder


def _variable_all(name: str, label: str, query: str, all_value: str | None) -> Any:
    variable = (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .multi(True)
        .include_all(True)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .current(VariableOption(text="All", value="$__all", selected=True))
    )
    return variable.all_value(all_value) if all_value is not None else variable


def build_dashboard() -> dict[str, Any]:
    board = (
        dashboard.Dashboard(DASHBOARD_TITLE)
        .uid(DASHBOARD_UID)
        .tags(["turnaudit"])
        .timezone("utc")
        .refresh("30s")
        .time("now-1h", "now")
        .readonly()
        .version(3)
        .with_variable(
            dashboard.DatasourceVariable(DS_INPUT).label("Data source").type("prometheus")
        )
        # "All" services: the jobs the query found (not `.*`, which would take in every
        # job's process metrics); "All" packs: any pack.
        .with_variable(_variable_all("job", "Service", JOB_QUERY, None))
        .with_variable(_variable_all("pack", "Pack", PACK_QUERY, ".*"))
    )
    for spec in PANELS:
        board = board.with_panel(_panel(spec))
    built: dict[str, Any] = json.loads(JSONEncoder().encode(board.build()))
    built["templating"]["list"][0]["current"] = {}  # the Grafana's Prometheus datasource
    panel_types = sorted({p["type"] for p in built["panels"]})
    return {
        "__inputs": [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes the turn-audit services and runtimes",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *[{"type": "panel", "id": kind, "name": kind, "version": ""} for kind in panel_types],
        ],
        **built,
    }


# -- contact points and the notification policy ---------------------------------------------


def build_notifications() -> dict[str, Any]:
    def contact(name: str, path: str) -> dict[str, Any]:
        point = (
            alerting.ContactPoint()
            .uid(name)
            .name(name)
            .type("webhook")
            .settings({"url": f"{WEBHOOK}/{path}", "httpMethod": "POST"})
            .disable_resolve_message(False)
        )
        built: dict[str, Any] = json.loads(JSONEncoder().encode(point.build()))
        return {
            "orgId": 1,
            "name": built.pop("name"),
            "receivers": [built],
        }

    policy = (
        alerting.NotificationPolicy()
        .receiver("turnaudit-ticket")
        .group_by(["grafana_folder", "alertname", "pack", "job"])
        .group_wait("30s")
        .group_interval("5m")
        .repeat_interval("12h")
        .routes(
            [
                alerting.NotificationPolicy()
                .receiver("turnaudit-page")
                .object_matchers([["severity", "=", "page"]])
                .group_wait("10s")
                .group_interval("1m")
                .repeat_interval("1h")
            ]
        )
    )
    return {
        "apiVersion": 1,
        "contactPoints": [contact("turnaudit-page", "page"), contact("turnaudit-ticket", "ticket")],
        "policies": [{"orgId": 1, **json.loads(JSONEncoder().encode(policy.build()))}],
    }


# -- files ---------------------------------------------------------------------------------

HEADERS = {
    "rules": (
        "# Generated by deploy/grafana/generate.py from deploy/prometheus/rules/*.yml: do not\n"
        "# edit; change the Prometheus rule (or the generator) and run it again.\n"
        "# Grafana-managed alert rules, one per Prometheus alert: query A stands alone (the\n"
        "# recording rules it reads are written in), B is the condition. Datasource: the\n"
        "# provisioned Prometheus (generate.py --datasource-uid UID for another). See\n"
        "# docs/alerting.md.\n"
    ),
    "notifications": (
        "# Generated by deploy/grafana/generate.py: do not edit. The contact points and the\n"
        "# notification policy of the Grafana-managed turn-audit rules: severity=page to\n"
        "# turnaudit-page, the rest batched to turnaudit-ticket (the routing of\n"
        "# deploy/alertmanager/alertmanager.yml). Both are webhooks on the example receiver\n"
        "# (compose service alert-webhook): point them at your paging and ticketing tools.\n"
        "# A provisioned policy replaces the organisation's whole policy tree.\n"
    ),
}


def render(datasource_uid: str = DEFAULT_DATASOURCE_UID) -> dict[str, str]:
    """Every output file's text, by output name."""

    def dump(data: Any) -> str:
        text: str = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
        return text

    return {
        "dashboard": json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n",
        "rules": HEADERS["rules"] + dump(build_rules(datasource_uid)),
        "notifications": HEADERS["notifications"] + dump(build_notifications()),
    }


def differences(out: Path = HERE, datasource_uid: str = DEFAULT_DATASOURCE_UID) -> Iterator[str]:
    for name, text in render(datasource_uid).items():
        path = out / OUTPUTS[name]
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), str(path), "generated", lineterm="", n=1
            )
            yield "\n".join(list(diff)[:40])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write (deploy/grafana)")
    parser.add_argument(
        "--datasource-uid",
        default=DEFAULT_DATASOURCE_UID,
        help="uid of the Prometheus datasource the alert rules query",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file differs from what is generated",
    )
    args = parser.parse_args(argv)
    if args.check:
        found = list(differences(args.out, args.datasource_uid))
        for diff in found:
            print(diff, file=sys.stderr)
        return 1 if found else 0
    for name, text in render(args.datasource_uid).items():
        path = args.out / OUTPUTS[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
