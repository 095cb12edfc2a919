"""A cell's cost: ``cost_usd``, ``cost_per_epoch_usd`` and ``price_source``.

Every node the cell used is paid for the cell's time (``elapsed_s``, launch to the last
worker's end, in the board's time on a time-dilated cell; launch to reaping when the
cell did not end well) at its ``--price`` (``profiler.cluster.prices``). A board's price
adds its electricity: the node's own energy in the record (``energy_j_by_node``, over
the training window) where there is one, else its power model at full load for the
cell's time.

Cost per epoch is one epoch's share: the nodes' hourly price for the mean epoch's time,
and the electricity of that time (the node's joules x epoch time / their window). The
processes' start-up is out, so that it compares with an epoch timed elsewhere (a cloud
VM's, the study's); ``cost_usd`` has it in: what the user paid for the cell.

A node with no price (a ``--price PROFILE=..`` naming none for its profile) makes the
cell's cost None, and ``price_source`` says which.
"""

from __future__ import annotations

from typing import Sequence

from ..cluster.prices import J_PER_KWH, Price, PriceSpec
from . import board_time


def cost_columns(record: dict, spec: PriceSpec | None, nodes: Sequence) -> dict:
    """The cost columns of ``record``, a cell run on ``nodes`` (``cluster.base.Node``)."""
    if spec is None:
        return {}
    hours = _hours(record)
    unpriced = sorted({n.profile for n in nodes if spec.price_of(n.profile) is None})
    if unpriced:
        return {"cost_usd": None, "cost_per_epoch_usd": None,
                "price_source": f"--price {spec.text} names no price for profile "
                                f"{', '.join(unpriced)}"}
    if hours is None:
        return {"cost_usd": None, "cost_per_epoch_usd": None,
                "price_source": "no time recorded for the cell"}
    by_node = record.get("energy_j_by_node") or {}
    epochs = record.get("epoch_s") or []  # a list: board_time leaves it as run
    epoch_s = sum(epochs) / len(epochs) * board_time.speedup(record) if epochs else None
    train_s = board_time.value(record, "train_s") or hours * 3600
    total_usd, epoch_usd, energy_from, unpowered = 0.0, 0.0, set(), set()
    for node in nodes:
        price = spec.price_of(node.profile)
        total_usd += price.hardware_usd_per_h * hours
        epoch_usd += price.hardware_usd_per_h * (epoch_s or 0) / 3600
        if price.is_board:
            joules, source = _energy_j(price, by_node.get(node.name), hours, record)
            if joules is None:
                unpowered.add(price.name)
                continue
            electricity_usd = joules / J_PER_KWH * spec.electricity_usd_per_kwh
            total_usd += electricity_usd
            # The cell's own joules cover its training window, the model's its whole time.
            window_s = train_s if by_node.get(node.name) is not None else hours * 3600
            if window_s > 0:
                epoch_usd += electricity_usd * (epoch_s or 0) / window_s
            energy_from.add(source)
    return {"cost_usd": _significant(total_usd),
            "cost_per_epoch_usd": _significant(epoch_usd) if epoch_s else None,
            "price_source": _said(spec, nodes, energy_from, unpowered)}


def _significant(usd: float) -> float:
    """Six significant digits: a tiny test cell costs millionths of a dollar."""
    return float(f"{usd:.6g}")


def _hours(record: dict) -> float | None:
    """The cell's time in hours (the board's time on a dilated cell)."""
    elapsed_s = board_time.value(record, "elapsed_s")
    if elapsed_s is None and record.get("launched_at") and record.get("reaped_at"):
        elapsed_s = (record["reaped_at"] - record["launched_at"]) * board_time.speedup(record)
    return None if elapsed_s is None else elapsed_s / 3600


def _energy_j(price: Price, node_j, hours: float, record: dict) -> tuple[float | None, str]:
    """The node's joules for the cell, and where they came from."""
    if isinstance(node_j, (int, float)):
        return float(node_j), f"the cell's {record.get('energy_source') or 'own'} energy"
    if price.full_w is None:
        return None, ""
    return price.full_w * hours * 3600, f"{price.power_profile} at full load {price.full_w:g} W"


def _said(spec: PriceSpec, nodes: Sequence, energy_from: set[str],
          unpowered: set[str]) -> str:
    """``pi3b (35 USD over 26,280 h + electricity) x 3 nodes; electricity 0.16 USD/kWh x
    the cell's modelled energy``."""
    counts: dict[str, int] = {}
    for node in nodes:
        said = spec.price_of(node.profile).said()
        counts[said] = counts.get(said, 0) + 1
    text = "; ".join(f"{said} x {n} node{'s' if n > 1 else ''}" for said, n in counts.items())
    if energy_from:
        text += (f"; electricity {spec.electricity_usd_per_kwh:g} USD/kWh x "
                 + ", ".join(sorted(energy_from)))
    if unpowered:
        text += f"; no electricity for {', '.join(sorted(unpowered))} (no power model)"
    return text
