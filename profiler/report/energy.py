"""The report's energy and cost: a figure of time against energy per cell, and a table
of each cell's energy and cost beside the same training on a named cloud VM.

The energy columns are the record's (``energy_j``, ``j_per_sample``, ...; measured or
modelled, said in ``energy_source``), the cost columns ``--price``'s
(``profiler.sweep.cost``). The cloud VM is priced from the profile files' prices
(``profiler.cluster.prices``) and an epoch time the user measured or gives
(``edgeprof report --cloud-vm NAME --cloud-epoch-s S``), one for all cells or one per
model: ``lenet-cnn=12,resnet=300``. Its cost per epoch is VMs x USD/h x S / 3600,
beside each cell's ``cost_per_epoch_usd``. Times of dilated cells are the board's.
Without any energy or cost column the page has no such section.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..cluster.prices import Price, PriceTable
from ..engines import engine_label
from ..errors import ConfigError
from ..results_schema import columns_of, help_of
from ..status import Status
from ..sweep import board_time

# The energy and cost numbers a record may hold (profiler.results_schema's groups).
NUMBERS = columns_of("energy", "cost", kind="float")
# Added to the page's cell table when a record has them.
STATUS_COLUMNS = [("energy_j", "energy J"), ("j_per_sample", "J/sample"),
                  ("cost_per_epoch_usd", "USD/epoch")]
# The section's table: (record key, heading); the cloud VM's columns follow when given.
SECTION_COLUMNS = [("energy_j", "energy J"), ("avg_power_w", "avg W"),
                   ("j_per_sample", "J/sample"), ("energy_to_accuracy_j", "J to final acc"),
                   ("energy_source", "source"), ("cost_usd", "cost USD"),
                   ("cost_per_epoch_usd", "USD/epoch")]
CLOUD_HEADINGS = ["epoch s", "cloud epoch s", "cloud USD/epoch", "cost / cloud", "time / cloud"]
MARKERS = "os^DvP*Xh<>"


@dataclass(frozen=True)
class CloudVM:
    """The cloud side of the comparison: ``count`` VMs of ``price``, an epoch taking
    ``epoch_s`` (one for every model: key ``""``) there."""

    price: Price
    count: int
    epoch_s: dict[str, float]

    def epoch_s_of(self, model: str) -> float | None:
        return self.epoch_s.get(model, self.epoch_s.get(""))

    def usd_per_epoch(self, model: str) -> float | None:
        epoch_s = self.epoch_s_of(model)
        if epoch_s is None:
            return None
        return self.count * self.price.hardware_usd_per_h * epoch_s / 3600

    @property
    def label(self) -> str:
        many = f"{self.count} x " if self.count > 1 else ""
        return f"{many}{self.price.name} ({self.count * self.price.usd_per_h:g} USD/h)"


def cloud_vm(name: str, count: int, epoch_s: str, table: PriceTable) -> CloudVM:
    """``--cloud-vm``, ``--cloud-vms`` and ``--cloud-epoch-s`` checked (one line each)."""
    price = table.get(name)
    if price.is_board:
        raise ConfigError(f"--cloud-vm {name} is a board, not a VM: give one of "
                          + ", ".join(sorted(n for n, p in table.prices.items()
                                             if not p.is_board)))
    if count < 1:
        raise ConfigError(f"--cloud-vms {count}: give how many VMs train together, e.g. 4")
    return CloudVM(price, count, _epoch_times(epoch_s))


def _epoch_times(text: str) -> dict[str, float]:
    """``30`` (every model) or ``lenet-cnn=12,resnet=300``."""
    out: dict[str, float] = {}
    for item in (i.strip() for i in (text or "").split(",")):
        model, _, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not item or not 0 < seconds < math.inf or model in out:
            raise ConfigError(f"--cloud-epoch-s {text}: give the seconds one epoch takes on "
                              "the VM, e.g. 30, or per model: lenet-cnn=12,resnet=300")
        out[model.strip()] = seconds
    return out


def has_energy(records: list[dict]) -> bool:
    """Whether any record has an energy or cost value (else the page shows none)."""
    return any(r.get(c) is not None for r in records for c in NUMBERS)


def status_columns(records: list[dict]) -> list[tuple[str, str]]:
    """The energy and cost columns of the page's cell table that some record fills."""
    return [(key, heading) for key, heading in STATUS_COLUMNS
            if any(r.get(key) is not None for r in records)]


def _strategy(r: dict) -> str:
    return f"{engine_label(r)} {r.get('sync', '')}".strip()


def _model(r: dict) -> str:
    return f"{r['model']}-{r['layers']}" if r.get("layers") else str(r["model"])


def figure(records: list[dict]):
    """Time against energy, a mark per finished cell: its shape the strategy (engine and
    sync mode), its colour the model, its label the device count. None without energy."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    from .figures import Figure, plt, png_bytes

    cells = [board_time.record(r) for r in records
             if r.get("status") == Status.OK and r.get("energy_j") is not None
             and r.get("train_s") is not None]
    if not cells:
        return None
    strategies = sorted({_strategy(r) for r in cells})
    models = sorted({_model(r) for r in cells})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for r in cells:
        x, y = r["energy_j"], r["train_s"]
        ax.scatter(x, y, marker=MARKERS[strategies.index(_strategy(r)) % len(MARKERS)],
                   color=colours[models.index(_model(r)) % len(colours)], s=46,
                   edgecolors="black", linewidths=0.4, zorder=3)
        ax.annotate(f"x{r['devices']}", (x, y), textcoords="offset points", xytext=(5, 3),
                    fontsize=7)
    for i, strategy in enumerate(strategies):
        ax.scatter([], [], marker=MARKERS[i % len(MARKERS)], color="white",
                   edgecolors="black", label=strategy)
    for i, model in enumerate(models):
        ax.scatter([], [], marker="s", color=colours[i % len(colours)], label=model)
    if max(r["energy_j"] for r in cells) > 20 * max(min(r["energy_j"] for r in cells), 1e-9):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # 20, 50, 100 rather than 2 x 10^1
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("energy of the cell, all its nodes (J)")
    ax.set_ylabel("training time of the cell (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    sources = sorted({str(r.get("energy_source")) for r in cells})
    return Figure("fig-time-energy", "Time against energy per cell",
                  "each finished cell's training time (first worker start to last end, "
                  "in the board's time) against the energy of all its nodes over that "
                  "window; shape: engine and sync mode, colour: model, label: devices. "
                  f"Energy {'/'.join(sources)} (energy_source).", png_bytes(fig))


def section(records: list[dict], cloud: CloudVM | None, number, config_of) -> dict | None:
    """The page's energy and cost table: a row per cell with energy or cost, the cloud
    VM's epoch time and cost beside when one is given. ``number`` formats a value,
    ``config_of`` names a cell."""
    if not has_energy(records):
        return None
    columns = _section_columns(cloud)
    rows = []
    for raw in records:
        if not any(raw.get(c) is not None for c in NUMBERS):
            continue
        r = board_time.record(raw)
        values = [_shown(r, key, number) for key, _ in SECTION_COLUMNS]
        if cloud is not None:
            values += _beside_cloud(raw, cloud, number)
        rows.append({"config": config_of(raw), "record": raw, "numbers": values})
    # Each price once: the node counts (" x 3 nodes") differ from cell to cell.
    sources = sorted({re.sub(r" x \d+ nodes?", "", r["record"]["price_source"]) for r in rows
                      if r["record"].get("price_source")})
    return {"headings": [column["heading"] for column in columns], "columns": columns,
            "rows": rows, "prices": sources,
            "cloud": cloud.label if cloud is not None else "",
            "cloud_source": cloud.price.source if cloud is not None else ""}


def _section_columns(cloud: CloudVM | None) -> list[dict]:
    """The section's headings, each with its column's meaning and unit as its help (the
    cloud VM's columns are the page's own)."""
    columns = [{"heading": heading, "help": help_of(key)} for key, heading in SECTION_COLUMNS]
    if cloud is not None:
        columns += [{"heading": heading, "help": ""} for heading in CLOUD_HEADINGS]
    return columns


def _shown(r: dict, key: str, number) -> str:
    """A value of the section's table: text as it is, numbers formatted."""
    return (r.get(key) or "") if key == "energy_source" else number(r.get(key))


def _beside_cloud(r: dict, cloud: CloudVM, number) -> list[str]:
    epochs = r.get("epoch_s") or []  # a list: board_time.record leaves it as run
    epoch_s = sum(epochs) / len(epochs) * board_time.speedup(r) if epochs else None
    cloud_s = cloud.epoch_s_of(str(r.get("model")))
    cloud_usd = cloud.usd_per_epoch(str(r.get("model")))
    mine = r.get("cost_per_epoch_usd")
    return [number(epoch_s), number(cloud_s), number(cloud_usd),
            number(mine / cloud_usd if mine is not None and cloud_usd else None),
            number(epoch_s / cloud_s if epoch_s and cloud_s else None)]
