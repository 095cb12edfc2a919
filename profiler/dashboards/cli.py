"""``edgeprof dashboards push``: edgeprof's dashboards (and datasource) into Grafana."""

from __future__ import annotations

from pathlib import Path

import click

from ..cli_errors import reports_errors


@click.group()
def dashboards() -> None:
    """Grafana dashboards of edgeprof (profiler/dashboards/*.json; see docs/dashboards.md).

    Example:

    \b
        GRAFANA_TOKEN=... edgeprof dashboards push --grafana-url http://monitor:3000
    """


@dashboards.command()
@click.option("--grafana-url", required=True, help="Grafana's URL, e.g. http://monitor:3000.")
@click.option("--grafana-user", default=None,
              help="Log in as this user with $GRAFANA_PASSWORD (default: a token).")
@click.option("--grafana-token-file", default=None, type=click.Path(path_type=Path),
              help="File (mode 0600) holding the service-account token or, with "
                   "--grafana-user, the password; default $GRAFANA_TOKEN/$GRAFANA_PASSWORD.")
@click.option("--folder", default="edgeprof", show_default=True,
              help="Title of the folder the dashboards go into (uid edgeprof).")
@click.option("--influx-url", default=None,
              help="Also create or update the InfluxDB datasource (uid edgeprof-influxdb) "
                   "at this URL, as Grafana's server reaches it.")
@click.option("--influx-db", default="edgeprof", show_default=True,
              help="Database (InfluxDB 1.x) or DBRP-mapped database name (2.x).")
@click.option("--influx-version", type=click.Choice(["1", "2"]), default="1",
              show_default=True, help="2: InfluxDB 2.x through its v1 API, token in a header.")
@click.option("--influx-token-file", default=None, type=click.Path(path_type=Path),
              help="File (0600) with the datasource's user:password (1.x) or token (2.x); "
                   "default $INFLUX_TOKEN.")
@click.option("--resend-secrets", is_flag=True,
              help="Send the datasource's secret even if its settings did not change.")
@click.option("--dashboards-dir", default=None, type=click.Path(path_type=Path),
              help="Folder of dashboard JSON files (default: those edgeprof installs, "
                   "profiler/dashboards/*.json).")
@reports_errors
def push(grafana_url, grafana_user, grafana_token_file, folder, influx_url, influx_db,
         influx_version, influx_token_file, resend_secrets, dashboards_dir) -> None:
    """Create or update the dashboards (by uid, overwrite) in a folder; a second push
    changes nothing. Credentials from the environment or a 0600 file, never argv.

    Example:

    \b
        export GRAFANA_TOKEN=glsa_...      # a service account token (Editor)
        edgeprof dashboards push --grafana-url http://monitor:3000 \\
            --influx-url http://monitor:8086 --influx-token-file ~/.influx-credentials
    """
    from ..errors import ConfigError
    from ..secrets import read_secret
    from .push import DEFAULT_DASHBOARDS, Datasource, check_url, load_dashboards
    from .push import push as push_boards

    check_url(grafana_url)
    if grafana_user:
        password = read_secret(grafana_token_file, "GRAFANA_PASSWORD", "--grafana-token-file")
        if not password:
            raise ConfigError("--grafana-user needs a password: set GRAFANA_PASSWORD or give "
                              "--grafana-token-file (mode 0600)")
        credential = (grafana_user, password)
    else:
        credential = read_secret(grafana_token_file, "GRAFANA_TOKEN", "--grafana-token-file")
        if not credential:
            raise ConfigError("no Grafana credentials: set GRAFANA_TOKEN (a service account "
                              "token), or GRAFANA_PASSWORD with --grafana-user, or give "
                              "--grafana-token-file (mode 0600)")
    datasource = None
    if influx_url:
        if not influx_url.startswith(("http://", "https://")):
            raise ConfigError(f"--influx-url {influx_url!r} is not an http(s) URL")
        datasource = Datasource(influx_url, influx_db, int(influx_version),
                                read_secret(influx_token_file, "INFLUX_TOKEN",
                                            "--influx-token-file"))
    boards = load_dashboards(dashboards_dir or DEFAULT_DASHBOARDS)
    result = push_boards(grafana_url, credential, boards, folder_title=folder,
                         datasource=datasource, resend_secrets=resend_secrets)
    for item in result.written:
        click.echo(f"written: {item}")
    for item in result.provisioned:
        click.echo(f"not written: {item} differs, but Grafana provisions it from files, "
                   "which its API cannot change: update those (the Ansible monitor role, "
                   "docs/dashboards.md)")
    click.echo(f"{len(result.written)} written, {len(result.unchanged)} unchanged"
               + (f", {len(result.provisioned)} provisioned from files (not written)"
                  if result.provisioned else ""))
