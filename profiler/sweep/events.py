"""Reads the workers' JSON-lines events of a cell and turns them into result columns.

Workers write ``events/worker-<rank>.jsonl`` (see ``workloads.events``). Times are
``time.time()`` stamps, comparable across processes of one host; on real multi-host
clusters they are as good as the nodes' clock sync (NTP).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

from workloads.datasets.catalog import CLASSES
from workloads.datasets.resolver import parts as data_parts
from workloads.events import read_events

from . import divergence


@dataclass
class CellEvents:
    by_rank: dict[int, list[dict]] = field(default_factory=dict)

    def of(self, kind: str) -> list[dict]:
        return [e for events in self.by_rank.values() for e in events if e.get("event") == kind]

    def complete(self) -> bool:
        """Every worker that started also ended."""
        starts = self.of("start")
        return bool(starts) and len(self.of("end")) >= len(starts) >= _num_workers(starts)

    def error_of_kind(self, kind: str) -> str | None:
        for e in self.of("error"):
            if e.get("kind") == kind:
                return f"worker {e.get('rank')}: {e.get('message', kind)}"
        return None

    def phase(self, rank: int) -> str | None:
        """Where worker ``rank`` was when its events stop: "in its first epoch", "after
        epoch N" or "after its end event"; None before its start (a crash's place in a
        reason)."""
        kinds = [e.get("event") for e in self.by_rank.get(rank, [])]
        if "end" in kinds:
            return "after its end event"
        if "start" not in kinds:
            return None
        epochs = kinds.count("epoch")
        return f"after epoch {epochs}" if epochs else "in its first epoch"

    def parameters(self) -> int | None:
        """The model's trainable parameters, as the workers counted them: rank 0's count,
        or a pipeline's (its start names a ``stage``) summed over its replica's stages,
        each of which holds only its own layers."""
        start0 = self.start0()
        if start0.get("stage") is None:
            return start0.get("param_count")
        stages = {e.get("stage"): e.get("param_count") for e in self.of("start")
                  if e.get("replica") == start0.get("replica")}
        if None in stages.values() or len(stages) != start0.get("stages", len(stages)):
            return None  # a stage that did not say: no count rather than a part of one
        return sum(stages.values())

    def train_window(self) -> tuple[float, float] | None:
        """(first worker start, last worker end), the training window, or None."""
        starts, ends = self.of("start"), self.of("end")
        if not starts or not ends:
            return None
        return min(e["t"] for e in starts), max(e["t"] for e in ends)

    def start0(self) -> dict:
        """Rank 0's ``start`` event; its ``steps_per_epoch`` from its ``end`` where the
        start could not know it (a user's script says it once an epoch has run)."""
        events = self.by_rank.get(0, [])
        start = next((e for e in events if e.get("event") == "start"), {})
        if start.get("steps_per_epoch") is None:
            end = next((e for e in events if e.get("event") == "end"), {})
            if end.get("steps_per_epoch") is not None:
                start = {**start, "steps_per_epoch": end["steps_per_epoch"]}
        return start

    def epochs_by_rank(self) -> dict[int, list[dict]]:
        """Each worker's ``epoch`` events, in epoch order."""
        return {rank: sorted((e for e in events if e.get("event") == "epoch"),
                             key=lambda e: e.get("epoch", 0))
                for rank, events in self.by_rank.items()}

    def samples_trained(self) -> int | None:
        """The samples the workers trained, summed over workers and epochs (each
        ``end`` event's ``samples``); None unless every worker that ended said."""
        counted = [e.get("samples") for e in self.of("end")]
        if not counted or not all(isinstance(n, int) and not isinstance(n, bool)
                                  for n in counted):
            return None
        return sum(counted) or None

    def maxrss_by_node(self) -> dict[str, float]:
        """Per node (its workers' ``start`` events say which), the peak RSS its workers
        reported from the kernel at their end (``end`` or ``error``: ``maxrss_mb``),
        summed over them; nodes whose workers did not report are left out."""
        out: dict[str, float] = {}
        for events in self.by_rank.values():
            node = next((e.get("node") for e in events if e.get("event") == "start"), None)
            last = [e["maxrss_mb"] for e in events
                    if e.get("event") in ("end", "error") and e.get("maxrss_mb")]
            if node and last:
                out[node] = out.get(node, 0.0) + last[-1]
        return out

    def columns(self, t_launch: float) -> dict:
        """The events' share of a results row; missing values are None."""
        ends, first_steps = self.of("end"), self.of("first_step")
        rank0_epochs = sorted((e for e in self.by_rank.get(0, []) if e.get("event") == "epoch"),
                              key=lambda e: e["epoch"])
        accuracies = [e.get("val_accuracy") for e in rank0_epochs]
        start0 = self.start0()
        window = self.train_window()
        # The classes the model chose among (a user's data has its own count; older
        # events, ten); a user's script does not say, and its loss may be anything:
        # only a non-finite one is judged.
        classes = None if "script" in start0 else start0.get("classes", CLASSES)
        diverged, divergence_reason = divergence.judge(
            self.epochs_by_rank(), classes=classes,
            steps_per_epoch=start0.get("steps_per_epoch"))
        return {
            "elapsed_s": round(max(e["t"] for e in ends) - t_launch, 3) if ends else None,
            "train_s": round(window[1] - window[0], 3) if window else None,
            "first_step_s": (round(min(e["t"] for e in first_steps) - t_launch, 3)
                             if first_steps else None),
            "epoch_s": [round(e["epoch_s"], 3) for e in rank0_epochs],
            "val_accuracy": accuracies[-1] if accuracies else None,
            "val_accuracy_per_epoch": accuracies,
            "samples_per_s": (round(sum(e.get("samples_per_s") or 0 for e in ends), 2)
                              if ends else None),
            "syncs_per_worker": (round(mean(syncs), 1) if (syncs := [
                e["syncs"] for e in ends if e.get("syncs") is not None]) else None),
            # The training set's size (before sharding), not what was trained: a
            # replicated or many-epoch cell trains more, samples_trained says how many.
            "train_samples": start0.get("train_samples"),
            "samples_trained": self.samples_trained(),
            "parameters": self.parameters(),
            "steady_s_per_sample": _steady_s_per_sample(rank0_epochs, start0),
            "lr_applied": start0.get("lr_applied"),
            "train_loss_per_epoch": divergence.loss_per_epoch(self.epochs_by_rank()),
            "diverged": diverged,
            "divergence": divergence_reason,
            # A user's script reports epochs and accuracy only if it calls
            # edgeprof_hooks.log (workloads.script_launcher): say when it did not.
            "accuracy_reported": (all(e.get("accuracy_reported", True) for e in ends)
                                  if ends else None),
        }


def read_cell_events(events_dir: Path) -> CellEvents:
    """Every worker's events of one cell attempt (``workloads.events`` reads each file)."""
    out = CellEvents()
    for path in sorted(Path(events_dir).glob("worker-*.jsonl")):
        rank = path.stem.split("-", 1)[1]
        if rank.isdigit():
            out.by_rank[int(rank)] = read_events(path)
    return out


def epochs_done(events_dir: Path) -> int:
    """Epochs rank 0 has finished so far (cheap enough to call every second)."""
    try:
        text = (Path(events_dir) / "worker-0.jsonl").read_text(encoding="utf-8",
                                                               errors="replace")
    except OSError:
        return 0
    # workloads.events writes json.dumps() lines (default separators): '"event": "epoch"'.
    return text.count('"event": "epoch"')


def _steady_s_per_sample(rank0_epochs: list[dict], start0: dict) -> float | None:
    """The first epoch's training time per sample of the whole cell, without its first
    step (one-off costs that a full-sized epoch spreads over hundreds of steps)."""
    first = rank0_epochs[0] if rank0_epochs else {}
    steps = start0.get("steps_per_epoch") or 0
    if "first_step_s" not in first or steps < 2:
        return None
    # Samples of the training set, so that a replicated cell (each worker passes over
    # the whole set) compares with a sharded one (the workers share one pass).
    parts = data_parts(start0.get("data_partition", "shard"),
                       # A pipeline's S stages train one shard: its start says how many.
                       start0.get("data_shards") or start0.get("num_workers") or 1)
    samples = (steps - 1) * (start0.get("batch") or 0) * parts
    steady_s = first["epoch_s"] - first["first_step_s"]
    return round(steady_s / samples, 9) if samples > 0 and steady_s > 0 else None


def _num_workers(starts: list[dict]) -> int:
    return max((e.get("num_workers", 1) for e in starts), default=1)
