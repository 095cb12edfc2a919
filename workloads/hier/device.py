"""An end device of a hierarchical cell: streams its shard of the test set in batches
through its own network (coarse labels) and, by the cell's scheme, sends batches (or,
under early-exit, their unconfident samples) up to an edge or cloud node for the fine
answer (``workloads.hier``).

It is a ``workloads.train`` worker (``--worker workloads.hier.device:EndDevice``), so the
cell runner reads its events as any worker's: one "epoch" is the pass over its shard,
its samples and samples/s are the samples it streamed. Each batch is one step line
(``workloads.steps``): ``data_s`` the batch's preparation, ``compute_s`` the end
network, ``exchange_s`` the way up and back (the link's delay, and the privacy module's
first convolution, ``privacy_s``, included), with the
hierarchy's own fields beside them: how many samples each tier answered and how many of
those were right (coarse, and fine above the end tier), each upper tier's inference
time and images, the bytes of each link and each sample's latency.
``profiler.engines.hier.columns`` turns them into the cell's columns.

Under ``mapping`` the device first measures its own time per batch and one batch's round
trip to an edge node (equation 4's t_end and t_edge, with their delays), and so where
its batches go (``schemes.mapped_upper``) with N_map from eq. (4), or as given
(``--map-devices``); the start event carries the times, eq. (4)'s N_map and the one used.
"""

from __future__ import annotations

import os
import time

import numpy as np

from profiler.errors import ConfigError

from ..datasets.loader import Dataset, for_model
from ..worker import Worker
from . import PLAN_ENV, Plan
from . import labels as label_sets
from . import assign, nets, schemes, wire

CALIBRATION_BATCHES = 3  # timed batches on the end network (after one warm-up)
ASSIGNER_LINGER_S = 60.0  # device 0 waits at most this for the others to hear "finished"


class EndDevice(Worker):
    framework = "torch"
    teardown = False  # torch's teardown can abort (workloads.train)
    rendezvous_variables = ("RANK", "WORLD_SIZE", PLAN_ENV)

    def join(self) -> None:
        self.rank, self.num_workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.plan = Plan.from_env(os.environ[PLAN_ENV])

    def prepare(self) -> None:
        """The device's contiguous 1/N of the test set (uint8, fine labels), then
        ``build``. It stands as the worker's "training" data: what it streams."""
        from ..torch_worker import set_threads

        set_threads(self.args.threads)
        args = self.args
        t_data = time.perf_counter()
        total = min(args.val_samples or 10000, 10000)
        per_device = total // self.num_workers
        if per_device < args.batch:
            raise ConfigError(f"{total} test samples over {self.num_workers} end devices "
                              f"make no batch of {args.batch}: raise --val-samples or lower "
                              "--batch")
        # Handed out by the assigner, any batch may come to any device: the whole stream.
        rows = (slice(0, total) if self.plan.recovery != "off"
                else slice(self.rank * per_device, (self.rank + 1) * per_device))
        x, y = nets.read_set("test", rows, args.data_dir)
        self.data = Dataset(nets.DATASET, x, y, x, y, total, raw=True,
                            classes=label_sets.CLASSES["coarse"])
        self.batches_total = total // args.batch
        self.steps_per_epoch = (len(assign.own_batches(self.rank, self.num_workers,
                                                       self.batches_total))
                                if self.plan.recovery != "off" else per_device // args.batch)
        self.tail_start = self.steps_per_epoch
        t_build = time.perf_counter()
        self.build()
        self.startup_s.update(data=t_build - t_data, build=time.perf_counter() - t_build)

    def build(self) -> None:
        plan = self.plan
        if plan.recovery != "off" and self.rank == 0:  # the task assigner lives here
            host, port = plan.assigner.rsplit(":", 1)
            self.assigner = assign.Assigner(self.num_workers, self.batches_total,
                                            plan.recovery)
            assign.serve(self.assigner, host, int(port))
        self.model = plan.models["end"]
        self.net, self.train_s = nets.trained(self.model, "coarse", plan.train_samples,
                                              plan.seed, self.args.data_dir)
        self.target = schemes.upper(plan.scheme, self.rank, plan.counts) \
            if plan.scheme != "mapping" else None
        self.calibration: dict = {}
        if plan.scheme == "mapping":
            self.target = self._map()
        if plan.privacy_edge:  # by way of an edge node, which runs the module
            self.target = ("edge", self.rank % plan.counts["edge"])
        self.link = self._link(self.target) if self.target else None
        if self.link is not None:  # wait here for the upper node (it trains first) and
            # warm its network up, so the stream's first batch does not pay for either
            self.link.request({"op": "infer", "kind": "images"},
                              self.data.x_train[:self.args.batch])
        self.first_conv, self.privacy_s = None, 0.0
        self.streamed = self.coarse_correct = 0  # the stream's final coarse answers
        if plan.privacy and self.target:  # the upper network's first layer, run here
            upper_net, _ = nets.trained(plan.models[self.target[0]], "fine",
                                        plan.train_samples, plan.seed, self.args.data_dir)
            self.first_conv, _ = nets.split_first_conv(upper_net)

    def _link(self, target: tuple[str, int]) -> wire.Link:
        tier, index = target
        # The address the cluster gives for the link (a delaying relay's, or the node's).
        return wire.Link(f"end-{tier}", self.plan.addresses[f"end-{tier}"][index],
                         self.plan.delays.get(tier, 0.0))

    def _map(self) -> tuple[str, int]:
        """Equation (4) from this device's own measurements: its time per batch (its
        shard is local: t^c_end = 0) and one batch's round trip to its edge node."""
        plan = self.plan
        x = self.data.x_train[:self.args.batch]
        self._end_infer(x)  # warm-up
        t0 = time.perf_counter()
        for _ in range(CALIBRATION_BATCHES):
            self._end_infer(x)
        end_s = (time.perf_counter() - t0) / CALIBRATION_BATCHES
        probe = self._link(("edge", self.rank % plan.counts["edge"]))
        probe.request({"op": "infer", "kind": "images"}, x)  # connects, warms up
        t0 = time.perf_counter()
        probe.request({"op": "infer", "kind": "images"}, x)
        edge_s = time.perf_counter() - t0
        probe.close()
        nmap_eq4 = schemes.n_map(edge_s, end_s)
        # Measured and computed either way, so the record sets eq. (4) beside what was used.
        nmap = plan.n_map or nmap_eq4
        self.calibration = {"t_end_batch_s": round(end_s, 6), "t_edge_batch_s": round(edge_s, 6),
                            "n_map_eq4": nmap_eq4, "n_map": nmap}
        return schemes.mapped_upper(self.rank, plan.counts["edge"], nmap)

    def parameter_count(self) -> int:
        return nets.parameter_count(self.net)

    def start_fields(self) -> dict:
        return {"hier": {"scheme": self.plan.scheme, "counts": self.plan.counts,
                         "models": self.plan.models, "delays": self.plan.delays,
                         "threshold": self.plan.threshold,
                         "privacy": self.plan.privacy or self.plan.privacy_edge,
                         "privacy_at": ("edge" if self.plan.privacy_edge
                                        else "end" if self.plan.privacy else None),
                         "upper": list(self.target) if self.target else None,
                         "train_s": round(self.train_s, 3),
                         # Table 1's parameters and weights file of each tier's network
                         "sizes": nets.tier_sizes(self.plan.models, self.plan.counts),
                         "samples": self.batches_total * self.args.batch, **self.calibration}}

    def _end_infer(self, images: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            logits = self.net(torch.from_numpy(for_model(images, self.model, nets.DATASET)))
            return torch.softmax(logits, dim=1).numpy()

    def _send_up(self, images: np.ndarray) -> dict:
        """The upper tiers' reply for ``images`` (their features with the privacy
        module)."""
        import torch

        if self.first_conv is None:
            reply, _ = self.link.request({"op": "infer", "kind": "images"}, images)
            self.privacy_s = reply.get("privacy_s", 0.0)  # --privacy edge: the edge's
            return reply
        upper_model = self.plan.models[self.target[0]]
        t0 = time.perf_counter()
        with torch.no_grad():
            features = self.first_conv(torch.from_numpy(
                for_model(images, upper_model, nets.DATASET))).numpy()
        self.privacy_s = time.perf_counter() - t0
        reply, _ = self.link.request({"op": "infer", "kind": "features"}, features)
        return reply

    def train_epoch(self, epoch: int, on_first_step) -> tuple[None, None]:
        """The shard streamed once, in order, a batch a step (no training: no loss), or
        the batches the assigner hands out (``--recovery``)."""
        if self.plan.recovery != "off":
            self._assigned(epoch, on_first_step)
        else:
            for step in range(self.steps_per_epoch):
                self._batch(epoch, step, step)
                if on_first_step is not None:
                    on_first_step()
                    on_first_step = None
        if self.link is not None:
            self.link.close()
        return None, None

    def _assigned(self, epoch: int, on_first_step) -> None:
        """Ask end device 0's assigner for batches until it says the job is done; a
        failing device (the last ``--fail-devices``) stops after half its own batches:
        it says which it finished last and leaves, holding the next one it was given."""
        plan = self.plan
        link = wire.Link("assigner", plan.assigner)
        fails = self.rank >= self.num_workers - plan.fail
        own_done = processed = 0
        finished, timeouts_s = None, 0.0
        while True:
            reply, _ = link.request({"op": "next", "rank": self.rank, "finished": finished})
            finished = None
            timeouts_s += reply.get("timeouts_s", 0.0)
            if reply.get("finished") or (fails and own_done >= self.steps_per_epoch // 2):
                break
            if "task" not in reply:
                self.step_log.flush()  # a cell that cannot finish is stopped while waiting
                time.sleep(reply["wait"])
                continue
            self._batch(epoch, processed, reply["task"], moved=int(reply["moved"]),
                        timeouts_s=timeouts_s)
            timeouts_s = 0.0
            processed += 1
            own_done += not reply["moved"]
            finished = reply["task"]
            if on_first_step is not None:
                on_first_step()
                on_first_step = None
        link.close()
        if self.rank == 0:  # the assigner's process stays until every device was told
            self.assigner.wait_told(ASSIGNER_LINGER_S)
        # The end event counts the samples this device answered (Worker.run reads it).
        self.steps_per_epoch = processed

    def _batch(self, epoch: int, step: int, index: int, **extra) -> None:
        """Batch ``index`` of the device's data through the tiers, a step line."""
        clock, batch, log = time.perf_counter, self.args.batch, self.step_log
        t_begin = clock()
        images = self.data.x_train[index * batch:(index + 1) * batch]
        fine = self.data.y_train[index * batch:(index + 1) * batch]
        t_data = clock()
        probs = self._end_infer(images)
        t_end = clock()
        up = self._sent_up(probs)
        bytes0, self.privacy_s = self._link_bytes(), 0.0
        reply = self._send_up(images[up]) if up.any() else None
        self.syncs += reply is not None
        t_done = clock()
        if log.enabled:
            log.add(epoch=epoch, step=step, t=log.wall(t_begin), data_s=t_data - t_begin,
                    compute_s=t_end - t_data, exchange_s=t_done - t_end,
                    step_s=t_done - t_begin,
                    **self._outcome(probs, fine, up, reply, t_end - t_begin),
                    **({f"bytes_{self.link.name.replace('-', '_')}":
                        self._link_bytes() - bytes0} if self.link else {}), **extra)

    def _link_bytes(self) -> int:
        """The bytes on the device's link so far, both ways."""
        return self.link.bytes_sent + self.link.bytes_received if self.link else 0

    def _sent_up(self, probs: np.ndarray) -> np.ndarray:
        """Which samples of a batch go up: none (``end``), all (the others), or those
        the end network is not confident about (``early-exit``)."""
        if self.link is None:
            return np.zeros(len(probs), dtype=bool)
        if self.plan.scheme == "early-exit":
            return ~schemes.exits(probs, self.plan.threshold)
        return np.ones(len(probs), dtype=bool)

    def _outcome(self, probs, fine, up, reply, local_s: float) -> dict:
        """A batch's step-line fields of the hierarchy (module doc)."""
        coarse = label_sets.to_coarse(fine)
        end_coarse = probs.argmax(axis=1)
        fields = {"n": len(fine), "up": int(up.sum()), "local_s": local_s,
                  "privacy_s": self.privacy_s,
                  "end_coarse_ok": int((end_coarse == coarse).sum())}
        fields["ans_end"] = int((~up).sum())
        fields["coarse_ok_end"] = int((end_coarse[~up] == coarse[~up]).sum())
        self.streamed += len(fine)
        self.coarse_correct += fields["coarse_ok_end"]
        if reply is not None:
            tiers = np.asarray(reply["tier"])
            got_fine = np.asarray(reply["fine"])
            for tier in ("edge", "cloud"):
                mine = tiers == tier
                fields[f"ans_{tier}"] = int(mine.sum())
                fields[f"fine_ok_{tier}"] = int((got_fine[mine] == fine[up][mine]).sum())
                fields[f"coarse_ok_{tier}"] = int(
                    (label_sets.to_coarse(got_fine[mine]) == coarse[up][mine]).sum())
                self.coarse_correct += fields[f"coarse_ok_{tier}"]
                fields[f"infer_{tier}_s"] = reply["infer_s"].get(tier, 0.0)
                fields[f"img_{tier}"] = reply["images"].get(tier, 0)
            fields["bytes_edge_cloud"] = reply["bytes"].get("edge-cloud", 0)
            # The round trip without any network's time in it: the link (its delay, the
            # transfer, the framing) as the device saw it.
            fields["link"] = self.link.name
            fields["upper_infer_s"] = sum(reply["infer_s"].values())
        return fields

    def accuracy(self) -> float:
        """The coarse accuracy of the final answers to the device's stream (whichever
        tier gave them): what the record's ``val_accuracy`` holds, from device 0."""
        return self.coarse_correct / max(self.streamed, 1)
