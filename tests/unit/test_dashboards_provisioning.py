"""The Grafana provisioning files (what the Ansible monitor role installs) and
``edgeprof dashboards push`` put the dashboards and the datasource in the same place.

Two ways into one Grafana must agree on the folder (uid and title) and the datasource
(uid and name): otherwise a provisioned Grafana holds a second folder or datasource
after a push, and the dashboards' links differ between the two.
"""

from __future__ import annotations

import jinja2
import pytest
import yaml

from profiler.dashboards.push import DATASOURCE_UID, FOLDER_UID, Datasource
from tests.conftest import ROOT

PROVISIONING = ROOT / "dashboards" / "provisioning"
# What the monitor role passes (its defaults and the influx role's); values only
# need to render.
ROLE_VARS = {"ansible_managed": "Ansible managed", "edgeprof_grafana_dashboards_dir": "/d",
             "edgeprof_grafana_influx_url": "http://127.0.0.1:8086",
             "edgeprof_influx_credentials": "reader:secret", "edgeprof_influx_db": "edgeprof",
             "edgeprof_grafana_secrets_dir": "/etc/grafana/edgeprof",
             "edgeprof_influx_reader": "grafana", "edgeprof_influx_tls": True,
             "edgeprof_influx_tls_dir": "/etc/edgeprof/influx-tls"}


def _render(name: str) -> dict:
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        (PROVISIONING / name).read_text())
    return yaml.safe_load(template.render(**ROLE_VARS))


def test_the_file_provider_uses_pushs_folder():
    from profiler.dashboards.cli import push

    (provider,) = _render("dashboards.yaml.j2")["providers"]
    assert provider["folderUid"] == FOLDER_UID
    default_title = next(p.default for p in push.params if p.name == "folder")
    assert provider["folder"] == default_title
    assert provider["allowUiUpdates"] is False  # the files are the source (docs say so)


@pytest.mark.parametrize("name", ["datasource-influxdb1.yaml.j2", "datasource-influxdb2.yaml.j2"])
def test_the_provisioned_datasource_is_the_one_push_manages(name):
    (datasource,) = _render(name)["datasources"]
    pushed = Datasource("http://127.0.0.1:8086", "edgeprof").body()
    assert datasource["uid"] == pushed["uid"] == DATASOURCE_UID
    assert datasource["name"] == pushed["name"]
    assert datasource["type"] == pushed["type"] == "influxdb"
