"""One reducer per measurement: a node's samples of it, in a cell's window, to that
node's summary columns (``metrics.summary`` means them over nodes).

``REDUCERS`` maps an agent measurement to its reducer's class; a reducer keeps what it
needs of each point (``add``) and gives its columns at the end (``columns``). Most keep
only the samples from the window's start on; the counters (``net``) and the firmware's
sticky throttling bits (``throttle``) also need the last sample before it, and the
workers' memory (``proc``) falls back to it (see each class). What the columns mean and
in which unit: ``metrics.summary``'s module doc.
"""

from __future__ import annotations

from itertools import pairwise
from dataclasses import dataclass
from statistics import fmean, median

from ..agent.lineproto import ParsedPoint
from .counters import busy_share, value_at

# The firmware's current conditions; each has a sticky ``<name>_occurred`` bit too.
THROTTLE_CONDITIONS = ("under_voltage", "freq_capped", "throttled", "soft_temp_limit")
_COUNTERS = ("sent_bytes", "recv_bytes", "sent_packets", "recv_packets")


@dataclass(frozen=True)
class Window:
    """A cell's training window on the controller's clock, in ms since the epoch, and
    the live shipper's loopback traffic inside it (``summary._shipper_traffic``)."""

    start_ms: int
    end_ms: int
    shipper: dict[str, int]


class Reducer:
    """A node's samples of one measurement to its columns."""

    def add(self, point: ParsedPoint, window: Window) -> None:
        raise NotImplementedError

    def columns(self, window: Window) -> dict:
        raise NotImplementedError


class CpuReducer(Reducer):
    """``cpu``: ``cpu_percent_mean``/``_peak`` and ``node_cores`` (the last sample's).

    The mean is the CPU-time counter's (``busy_s``) difference over the window,
    interpolated at its two ends as the network counters are, over the window's length
    times the cores it is a share of (``quota_cores`` on a cgroup node, else ``cores``),
    where the samples bracket the window; else the samples' mean. The peak is the
    highest sample.
    """

    def __init__(self) -> None:
        self.samples: list[tuple[int, float]] = []
        self.cores: list[float] = []
        self.counter: list[tuple[int, dict]] = []  # busy_s and the capacity, every tick
        self.capacity = 0.0

    def add(self, point: ParsedPoint, window: Window) -> None:
        fields = point.fields
        if "busy_s" in fields:
            self.counter.append((point.time_ms, fields))
            self.capacity = float(fields.get("quota_cores") or fields.get("cores") or 0)
        if point.time_ms >= window.start_ms and "cpu_percent" in fields:
            self.samples.append((point.time_ms, fields["cpu_percent"]))
            if "cores" in fields:
                self.cores.append(float(fields["cores"]))

    def columns(self, window: Window) -> dict:
        out: dict = {}
        # A CPU sample covers the interval before it, so the window's first one also
        # holds what the processes did before training: on the emulated cluster their
        # start-up, outside the node's quota (workloads/node_limits.py). Skip it when
        # others remain.
        cpu = self.samples
        interval_ms = median(b[0] - a[0] for a, b in pairwise(cpu)) if len(cpu) > 1 else 0
        later = [(t, v) for t, v in cpu if t >= window.start_ms + interval_ms]
        values = in_window(later if any(t <= window.end_ms for t, _ in later) else cpu,
                           window.end_ms)
        if values:
            out.update(cpu_percent_mean=fmean(values), cpu_percent_peak=max(values))
        mean = counter_percent(self.counter, "busy_s", self.capacity, window)
        if mean is not None:
            out["cpu_percent_mean"] = mean
        if self.cores:
            out["node_cores"] = self.cores[-1]
        return out


def counter_percent(series: list[tuple[int, dict]], name: str, capacity: float,
                    window: Window) -> float | None:
    """100 x a CPU-seconds counter's share of ``capacity`` cores over the window
    (``counters.busy_share``: interpolated at its ends; None unless samples bracket it)."""
    share = busy_share(series, name, capacity, window.start_ms, window.end_ms)
    return None if share is None else 100.0 * share


class MemReducer(Reducer):
    """``mem``: ``mem_used_mb_mean`` and ``_peak`` (samples), ``node_mem_peak_mb`` (the
    cgroup's own high-water mark, where the node has one) and ``samples_in_window``:
    how many ticks the sampled figures rest on (those inside the window, or the one
    after it that stands for a window shorter than the interval)."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float]] = []
        self.peaks: list[tuple[int, float]] = []

    def add(self, point: ParsedPoint, window: Window) -> None:
        if point.time_ms >= window.start_ms and "used_mb" in point.fields:
            self.samples.append((point.time_ms, point.fields["used_mb"]))
            if "peak_mb" in point.fields:
                self.peaks.append((point.time_ms, point.fields["peak_mb"]))

    def columns(self, window: Window) -> dict:
        values = in_window(self.samples, window.end_ms)
        if not values:
            return {}
        out = {"mem_used_mb_mean": fmean(values), "mem_used_mb_peak": max(values),
               "samples_in_window": len(values)}
        # The mark only rises (reset when the cell's agent started): the first reading
        # at or after the window's end holds the window's peak.
        peaks = in_window(self.peaks, window.end_ms)
        if peaks:
            after = [v for t, v in self.peaks if t >= window.end_ms]
            out["node_mem_peak_mb"] = after[0] if after else max(peaks)
        return out


class ProcReducer(Reducer):
    """``proc`` of the workers: ``rss_mb_mean`` and ``_peak``, their RSS summed at each
    tick; the peak is also at least the sum of their kernel high-water marks
    (``rss_hwm_mb``, VmHWM) read up to the first tick at or after the window's end."""

    def __init__(self) -> None:
        self.by_time: dict[int, float] = {}
        self.before: dict[int, float] = {}  # ticks before the window
        self.hwm: dict[int, float] = {}  # every tick's VmHWM sum

    def add(self, point: ParsedPoint, window: Window) -> None:
        if point.tags.get("role") != "worker":
            return
        ticks = self.before if point.time_ms < window.start_ms else self.by_time
        ticks[point.time_ms] = ticks.get(point.time_ms, 0.0) + point.fields["rss_mb"]
        if "rss_hwm_mb" in point.fields:
            self.hwm[point.time_ms] = (self.hwm.get(point.time_ms, 0.0)
                                       + point.fields["rss_hwm_mb"])

    def columns(self, window: Window) -> dict:
        # A cell shorter than the interval whose workers were gone by the next sample
        # has no worker sample in or after its window: the last one before it (the
        # workers loaded, about to train) is the nearest reading of their memory there is.
        values = in_window(sorted(self.by_time.items()), window.end_ms) or (
            [self.before[max(self.before)]] if self.before else [])
        if not values:
            return {}
        out = {"rss_mb_mean": fmean(values), "rss_mb_peak": max(values)}
        after = [t for t in self.hwm if t >= window.end_ms]
        last = min(after) if after else window.end_ms
        marks = [v for t, v in self.hwm.items() if t <= last]
        if marks:
            # The workers are the cell's own (started with it): their marks before the
            # window (loading the framework) are the cell's memory too.
            out["rss_mb_peak"] = max(out["rss_mb_peak"], max(marks))
        return out


class NetReducer(Reducer):
    """``net``: the counters of each interface, every sample (they are interpolated at
    the window's edges); ``net_*`` totals and ``net_*_per_s`` rates."""

    def __init__(self) -> None:
        self.by_interface: dict[str, list[tuple[int, dict]]] = {}

    def add(self, point: ParsedPoint, window: Window) -> None:
        self.by_interface.setdefault(point.tags.get("interface", ""), []).append(
            (point.time_ms, point.fields))

    def columns(self, window: Window) -> dict:
        if not self.by_interface:
            return {}
        totals = dict.fromkeys(_COUNTERS, 0.0)
        for series in self.by_interface.values():
            for name in _COUNTERS:
                totals[name] += (value_at(series, name, window.end_ms)
                                 - value_at(series, name, window.start_ms))
        if "lo" in self.by_interface:
            _take_out_shipper(totals, window.shipper)
        out = {"net_sent_kb": max(0.0, totals["sent_bytes"]) / 1024,
               "net_recv_kb": max(0.0, totals["recv_bytes"]) / 1024,
               "net_sent_packets": max(0.0, totals["sent_packets"]),
               "net_recv_packets": max(0.0, totals["recv_packets"])}
        window_s = (window.end_ms - window.start_ms) / 1000
        if window_s > 0:
            out.update({f"{name}_per_s": value / window_s for name, value in list(out.items())})
        return out


class CpuFreqReducer(Reducer):
    """``cpu_freq``: ``cpu_mhz_min``, the lowest frequency sampled, MHz to 0.1."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float]] = []

    def add(self, point: ParsedPoint, window: Window) -> None:
        if point.time_ms >= window.start_ms and "freq_mhz" in point.fields:
            self.samples.append((point.time_ms, float(point.fields["freq_mhz"])))

    def columns(self, window: Window) -> dict:
        values = in_window(self.samples, window.end_ms)
        return {"cpu_mhz_min": round(min(values), 1)} if values else {}


class ThrottleReducer(Reducer):
    """``throttle``: ``throttle_flags``, the conditions seen (``throttled_during``); the
    sample before the window is the sticky bits' baseline, so it is kept too."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []

    def add(self, point: ParsedPoint, window: Window) -> None:
        if "flags" in point.fields:
            self.samples.append((point.time_ms, int(point.fields["flags"])))

    def columns(self, window: Window) -> dict:
        if not self.samples:
            return {}
        return {"throttle_flags": throttled_during(self.samples, window.start_ms,
                                                   window.end_ms)}


REDUCERS: dict[str, type[Reducer]] = {
    "cpu": CpuReducer, "mem": MemReducer, "proc": ProcReducer, "net": NetReducer,
    "cpu_freq": CpuFreqReducer, "throttle": ThrottleReducer,
}


def throttled_during(samples: list[tuple[int, int]], start_ms: int, end_ms: int) -> list[str]:
    """The conditions (``THROTTLE_CONDITIONS``) a node's ``get_throttled`` words show
    during [start_ms, end_ms]: set in a sample of the window, or newly set in its sticky
    ``_occurred`` bit since the last sample before the window."""
    from ..agent.collectors.pi_throttling import THROTTLE_BITS

    before = [flags for t, flags in samples if t < start_ms]
    inside = in_window([(t, flags) for t, flags in samples if t >= start_ms], end_ms)
    baseline = before[-1] if before else None
    found = set()
    for flags in inside:
        for name in THROTTLE_CONDITIONS:
            sticky = THROTTLE_BITS[f"{name}_occurred"]
            if flags >> THROTTLE_BITS[name] & 1 or (
                    baseline is not None and flags >> sticky & 1 and not baseline >> sticky & 1):
                found.add(name)
    return [name for name in THROTTLE_CONDITIONS if name in found]


def in_window(samples: list[tuple[int, float]], end_ms: int) -> list[float]:
    """Values sampled in the window (samples before it are already dropped).

    A sample describes the interval that ends at its timestamp, so when the window is
    shorter than the interval and holds no sample, the first one after it covers it.
    """
    inside = [value for time_ms, value in samples if time_ms <= end_ms]
    return inside or [value for _, value in samples[:1]]


def _take_out_shipper(totals: dict[str, float], shipper: dict) -> None:
    """The live shipper's loopback traffic is not training traffic: on loopback every
    byte is counted once sent and once received, so both directions lose both."""
    both_bytes = shipper["sent_bytes"] + shipper["recv_bytes"]
    totals["sent_bytes"] -= both_bytes
    totals["recv_bytes"] -= both_bytes
    totals["sent_packets"] -= shipper["packets"]
    totals["recv_packets"] -= shipper["packets"]
