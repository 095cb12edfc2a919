"""edgeprof's agent beside the monitors it is compared with, all at 1 Hz, in one run.

Started together for ``--seconds`` (default 300, as issue 23's run) and measured from
outside with psutil (CPU seconds per wall second over the run after a warm-up, RSS at
the end, each process with its children):

- Ganglia's ``gmond`` (Debian ``ganglia-monitor``): cpu, load, memory, network and
  disk modules, every metric collected every second and sent to itself (unicast UDP on
  loopback, as a one-node cluster would);
- ``collectd`` (Debian ``collectd-core``): the cpu (per core), memory, interface, disk
  and load plugins at ``Interval 1``, twice: written to CSV files (on disk, as edgeprof
  writes a spool) and sent with its ``network`` plugin (UDP on loopback, nothing on
  disk: the cheaper of the two, and the one the ratios are against);
- ``prometheus-node-exporter``: the cpu, cpufreq, meminfo, netdev, diskstats, loadavg
  and hwmon collectors, scraped once a second by this script (a scrape is when it
  samples); the scraper's own CPU is counted apart, as it would be Prometheus's;
- edgeprof's agent through each entry point: ``python -m profiler.agent``, the
  ``edgeprof agent`` console script, and the systemd unit's ExecStart line as the
  playbook's template renders it.

The configs of gmond and collectd are written into a temporary folder; nothing is
installed or left running. Prints one table with ratios against collectd and gmond.

    .venv/bin/python benchmarks/bench_agent_peers.py [--seconds 300] [--warmup 10]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import jinja2
import psutil

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "ansible" / "roles" / "agent" / "templates" / "edgeprof-agent.service.j2"
MB = 2**20

GMOND_METRICS = ["cpu_user", "cpu_system", "cpu_idle", "cpu_wio", "cpu_num", "cpu_speed",
                 "load_one", "load_five", "load_fifteen", "mem_free", "mem_total",
                 "mem_cached", "mem_buffers", "bytes_in", "bytes_out", "pkts_in", "pkts_out",
                 "disk_free", "disk_total"]
NODE_EXPORTER_COLLECTORS = ["cpu", "cpufreq", "meminfo", "netdev", "diskstats", "loadavg",
                            "hwmon"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gmond_config(work: Path) -> Path:
    port = free_port()
    metrics = "\n".join(f'  metric {{ name = "{name}" value_threshold = 0 }}'
                        for name in GMOND_METRICS)
    found = sorted(Path("/usr/lib").glob("*/ganglia/modcpu.so")) + sorted(
        Path("/usr/lib").glob("ganglia/modcpu.so"))
    if not found:
        sys.exit("gmond's modules (modcpu.so) are not under /usr/lib: reinstall ganglia-monitor")
    modules = "\n".join(['  module { name = "core_metrics" }'] + [
        f'  module {{ name = "{name}_module" path = "{found[0].parent}/mod{name}.so" }}'
        for name in ("cpu", "disk", "load", "mem", "net")])
    path = work / "gmond.conf"
    path.write_text(f"""globals {{
  daemonize = no
  setuid = no
  debug_level = 0
  max_udp_msg_len = 1472
  mute = no
  deaf = no
  host_dmax = 0
  cleanup_threshold = 300
  send_metadata_interval = 30
}}
cluster {{ name = "bench" }}
udp_send_channel {{ host = 127.0.0.1 port = {port} ttl = 1 }}
udp_recv_channel {{ bind = 127.0.0.1 port = {port} }}
tcp_accept_channel {{ bind = 127.0.0.1 port = {free_port()} }}
modules {{
{modules}
}}
collection_group {{
  collect_every = 1
  time_threshold = 1
{metrics}
}}
""")
    return path


def collectd_config(work: Path, writer: str) -> Path:
    """collectd's config, writing with ``writer``: ``csv`` (files) or ``network`` (UDP)."""
    path = work / f"collectd-{writer}.conf"
    write = {"csv": f"""LoadPlugin csv
<Plugin csv>
  DataDir "{work}/collectd-csv"
  StoreRates true
</Plugin>
""", "network": f"""LoadPlugin network
<Plugin network>
  Server "127.0.0.1" "{free_port()}"
</Plugin>
"""}[writer]
    path.write_text(f"""Hostname "bench"
FQDNLookup false
BaseDir "{work}/collectd-{writer}"
PIDFile "{work}/collectd-{writer}.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
Interval 1
LoadPlugin logfile
<Plugin logfile>
  LogLevel warning
  File STDERR
</Plugin>
LoadPlugin cpu
LoadPlugin memory
LoadPlugin interface
LoadPlugin disk
LoadPlugin load
{write}""")
    (work / f"collectd-{writer}").mkdir()
    return path


def unit_argv(spool: Path) -> list[str]:
    """The systemd unit's ExecStart as the playbook renders it (spooling only)."""
    text = jinja2.Template(UNIT.read_text()).render(
        ansible_managed="bench", edgeprof_user="root", inventory_hostname="bench-unit",
        edgeprof_venv=str(Path(sys.executable).parent.parent), edgeprof_spool_dir=str(spool),
        edgeprof_agent_interval_s=1, edgeprof_interface=default_interface(),
        edgeprof_influx_credentials="")
    line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def default_interface() -> str:
    return next((name for name in psutil.net_if_addrs() if name != "lo"), "lo")


def commands(work: Path, exporter_port: int) -> dict[str, list[str]]:
    for tool in ("gmond", "collectd", "prometheus-node-exporter"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: scripts/setup.sh installs ganglia-monitor, "
                     "collectd-core and prometheus-node-exporter")
    edgeprof = Path(sys.executable).parent / "edgeprof"
    agent = ["--interval", "1", "--spool"]
    return {
        "gmond": ["gmond", "-f", "-c", str(gmond_config(work))],
        "collectd (network)": ["collectd", "-f", "-C", str(collectd_config(work, "network"))],
        "collectd (csv)": ["collectd", "-f", "-C", str(collectd_config(work, "csv"))],
        "node_exporter": ["prometheus-node-exporter",
                          f"--web.listen-address=127.0.0.1:{exporter_port}",
                          "--collector.disable-defaults",
                          *(f"--collector.{name}" for name in NODE_EXPORTER_COLLECTORS)],
        "edgeprof: python -m profiler.agent": [
            sys.executable, "-m", "profiler.agent", "--node", "bench-m", *agent,
            str(work / "spool-m")],
        "edgeprof: edgeprof agent": [str(edgeprof), "agent", "--node", "bench-c", *agent,
                                     str(work / "spool-c")],
        "edgeprof: systemd unit": unit_argv(work / "spool-u"),
    }


class Scraper(threading.Thread):
    """Scrapes node_exporter once a second; counts its own CPU (thread time) apart."""

    def __init__(self, url: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.url, self.stop, self.cpu_s, self.scrapes, self.failures = url, stop, 0.0, 0, 0

    def run(self) -> None:
        next_s = time.monotonic()
        while not self.stop.is_set():
            started = time.thread_time()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    resp.read()
                self.scrapes += 1
            except OSError:
                self.failures += 1
            self.cpu_s += time.thread_time() - started
            next_s += 1.0
            self.stop.wait(max(0.0, next_s - time.monotonic()))


def tree_cpu_s(proc: psutil.Process) -> float:
    total = 0.0
    for member in [proc, *proc.children(recursive=True)]:
        try:
            times = member.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def tree_rss_mb(proc: psutil.Process) -> float:
    total = 0
    for member in [proc, *proc.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total / MB


def measure(seconds: float, warmup_s: float) -> tuple[dict[str, tuple[float, float]], Scraper]:
    with tempfile.TemporaryDirectory(prefix="edgeprof-peers-") as tmp:
        work = Path(tmp)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = {name: subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                 for name, argv in commands(work, port).items()}
        stop = threading.Event()
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", stop)
        scraper.start()
        try:
            time.sleep(warmup_s)
            handles = {name: psutil.Process(proc.pid) for name, proc in procs.items()}
            for name, proc in procs.items():
                if proc.poll() is not None:
                    sys.exit(f"{name} exited at start (status {proc.returncode}): "
                             f"{shlex.join(proc.args)}")
            scraper.cpu_s, scraper.scrapes = 0.0, 0
            start_cpu = {name: tree_cpu_s(h) for name, h in handles.items()}
            started = time.monotonic()
            time.sleep(seconds)
            wall_s = time.monotonic() - started
            results = {name: ((tree_cpu_s(h) - start_cpu[name]) / wall_s, tree_rss_mb(h))
                       for name, h in handles.items()}
            scraper.cpu_s /= wall_s
        finally:
            stop.set()
            for proc in procs.values():
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for proc in procs.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return results, scraper


def ratio(value: float, reference: float) -> str:
    # CPU times tick in 10 ms: a short run can measure a quiet monitor at 0.
    return f"{value / reference:.2f}x" if reference > 0 else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    # A SIGTERM (timeout, kill) unwinds like Ctrl-C: the monitors started are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results, scraper = measure(args.seconds, args.warmup)
    collectd_cpu, collectd_rss = results["collectd (network)"]
    gmond_cpu, gmond_rss = results["gmond"]
    print(f"{args.seconds:.0f} s at 1 Hz, all at once, on {os.cpu_count()} cores; "
          f"node_exporter scraped {scraper.scrapes} times")
    header = (f"{'monitor':36} {'CPU s/s':>9} {'RSS MB':>7} {'CPU/collectd':>13} "
              f"{'CPU/gmond':>10} {'RSS/collectd':>13} {'RSS/gmond':>10}")
    print(header)
    print("-" * len(header))
    rows = list(results.items())
    rows.insert(4, ("node_exporter + its scrapes", (results["node_exporter"][0] + scraper.cpu_s,
                                                     results["node_exporter"][1])))
    for name, (cpu, rss) in rows:
        print(f"{name:36} {cpu:9.5f} {rss:7.1f} {ratio(cpu, collectd_cpu):>13} "
              f"{ratio(cpu, gmond_cpu):>10} {ratio(rss, collectd_rss):>13} "
              f"{ratio(rss, gmond_rss):>10}")
    print(f"(the scraper's own CPU, counted apart: {scraper.cpu_s:.5f} s/s)")


if __name__ == "__main__":
    main()
