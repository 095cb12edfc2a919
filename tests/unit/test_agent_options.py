"""Influx options, token handling, the agent's argv and its commands' help."""

import os
import sys

import click
import pytest
from click.testing import CliRunner

from profiler.agent.cli import agent
from profiler.metrics.launch import agent_argv
from profiler.agent.options import interval_option
from profiler.agent.shipping.options import influx_options
from profiler.agent.shipping.cli import ship
from profiler.agent.shipping.targets import target_from_options
from profiler.cluster.base import Node, NodeScope
from profiler.errors import ConfigError


def test_no_url_means_no_target_and_orphan_options_are_errors():
    assert target_from_options() is None
    with pytest.raises(ConfigError, match="--influx-bucket needs --influx-url"):
        target_from_options(influx_bucket="b")


def test_v1_and_v2_targets(monkeypatch):
    monkeypatch.setenv("INFLUX_TOKEN", "s3cret")
    v2 = target_from_options(influx_url="http://h:8086", influx_org="o", influx_bucket="b")
    v1 = target_from_options(influx_url="http://h:8086", influx_db="edgeprof")
    assert (v2.api, v1.api) == ("v2", "v1") and v2.key != v1.key
    assert v2.token == "s3cret" and "s3cret" not in repr(v2)
    with pytest.raises(ConfigError, match="exclude each other"):
        target_from_options(influx_url="http://h", influx_db="d", influx_bucket="b")
    with pytest.raises(ConfigError, match="needs --influx-org and --influx-bucket"):
        target_from_options(influx_url="http://h", influx_bucket="b")
    with pytest.raises(ConfigError, match="not an HTTP URL"):
        target_from_options(influx_url="h:8086", influx_db="d")


def test_token_file_must_be_private(tmp_path, monkeypatch):
    monkeypatch.delenv("INFLUX_TOKEN", raising=False)
    token = tmp_path / "token"
    token.write_text("abc\n")
    os.chmod(token, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        target_from_options(influx_url="http://h", influx_db="d", influx_token_file=token)
    os.chmod(token, 0o600)
    target = target_from_options(influx_url="http://h", influx_db="d", influx_token_file=token)
    assert target.token == "abc"


def test_interval_option_bounds():
    @click.command()
    @interval_option
    @influx_options
    def probe(interval, **_):
        click.echo(interval)

    runner = CliRunner()
    assert runner.invoke(probe, []).output.strip() == "1.0"
    assert runner.invoke(probe, ["--interval", "30"]).output.strip() == "30.0"
    assert runner.invoke(probe, ["--interval", "0.05"]).exit_code == 2
    assert "--influx-token" not in runner.invoke(probe, ["--help"]).output.replace(
        "--influx-token-file", "")


def test_commands_have_help_with_example():
    for command in (agent, ship):
        assert "Example:" in command.help


def test_agent_argv_carries_scope_and_tags(tmp_path):
    node = Node(name="n1", address="10.0.0.2", cpu_cores=1.0, memory_mb=1024,
                scope=NodeScope(interfaces=("eth0",), netns="ep-n1",
                                cgroup_cpu="/sys/fs/cgroup/cpuacct/ep/n1",
                                cgroup_memory="/sys/fs/cgroup/memory/ep/n1"))
    argv = agent_argv(node, tmp_path / "spool", tmp_path / "pids.json",
                      {"sweep": "s1", "cell": "c1", "node": "n1", "layers": "20"}, 0.5)
    assert argv[:3] == [sys.executable, "-m", "profiler.agent"]
    text = " ".join(argv)
    for expected in ("--node n1", "--interval 0.5", "--tag sweep=s1", "--tag layers=20",
                     "--interfaces eth0", "--cgroup-cpu /sys/fs/cgroup/cpuacct/ep/n1",
                     "--cgroup-memory /sys/fs/cgroup/memory/ep/n1", "--cpu-cores 1.0",
                     "--memory-mb 1024"):
        assert expected in text
    # The agent command accepts exactly this argv.
    ctx = agent.make_context("agent", argv[3:])
    assert ctx.params["node"] == "n1" and ctx.params["interval"] == 0.5


def test_bad_tag_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(agent, ["--node", "n", "--spool", str(tmp_path),
                                        "--tag", "oops"])
    assert result.exit_code == 2 and "is not key=value" in result.output


def test_credentials_in_the_url_become_the_token_and_leave_the_url(monkeypatch, tmp_path):
    monkeypatch.delenv("INFLUX_TOKEN", raising=False)
    v1 = target_from_options(influx_url="http://edge:s3cret%40PW@h:8086/", influx_db="d")
    assert v1.url == "http://h:8086/" and v1.token == "edge:s3cret@PW"
    v2 = target_from_options(influx_url="http://edge:s3cretPW@h:8086", influx_org="o",
                             influx_bucket="b")
    assert v2.token == "edge:s3cretPW"  # InfluxDB 1.8's v2 compatibility token
    for target in (v1, v2):
        assert "s3cret" not in target.label + target.key + repr(target)
    # The same server with and without credentials is the same destination.
    assert v1.key == target_from_options(influx_url="http://h:8086/", influx_db="d").key
    monkeypatch.setenv("INFLUX_TOKEN", "tok")
    with pytest.raises(ConfigError, match="keep one") as both:
        target_from_options(influx_url="http://u:s3cretPW@h:8086", influx_db="d")
    for bad in ("ftp://u:s3cretPW@h", "u:s3cretPW@h:8086", "http://u@h:8086"):
        monkeypatch.delenv("INFLUX_TOKEN", raising=False)
        with pytest.raises(ConfigError) as error:
            target_from_options(influx_url=bad, influx_db="d")
        assert "s3cret" not in str(error.value) and "u:" not in str(error.value)
    assert "s3cret" not in str(both.value)


def test_tls_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="applies to an https:// server"):
        target_from_options(influx_url="http://h", influx_db="d", influx_insecure=True)
    with pytest.raises(ConfigError, match="exclude each other"):
        target_from_options(influx_url="https://h", influx_db="d",
                            influx_ca=tmp_path / "ca.pem", influx_insecure=True)
    with pytest.raises(ConfigError, match="--influx-ca .* does not exist"):
        target_from_options(influx_url="https://h", influx_db="d",
                            influx_ca=tmp_path / "ca.pem")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="is not a PEM certificate file"):
        target_from_options(influx_url="https://h", influx_db="d",
                            influx_ca=tmp_path / "junk.pem")
    with pytest.raises(ConfigError, match="--influx-insecure needs --influx-url"):
        target_from_options(influx_insecure=True)
    insecure = target_from_options(influx_url="https://h", influx_db="d", influx_insecure=True)
    assert insecure.verify is False and insecure.recorded()["insecure"] is True
