"""The ``torch-pipe`` engine's worker: one stage of a model split across nodes.

The cell's ``WORLD_SIZE`` processes are R pipelines of S stages
(``EDGEPROF_PIPE_STAGES``): rank ``r`` runs stage ``r % S`` of pipeline ``r // S``.
Each pipeline trains its 1/R shard of the data (or all of it, ``replicate``); a step
feeds one batch of ``--batch`` samples as M micro-batches (``EDGEPROF_PIPE_MICROBATCHES``)
through ``torch.distributed.pipelining`` (``PipelineStage`` and ``ScheduleGPipe`` or
``Schedule1F1B``, ``EDGEPROF_PIPE_SCHEDULE``) over Gloo: activations forward, their
gradients back, stage to stage. With R > 1 the replicas of each stage then average
their gradients (an allreduce among them), and every stage applies SGD to its own
layers: synchronous SGD on a global batch of R x ``--batch``, as DDP's.

The split (``workloads.pipeline_split``): every process times each layer's forward and
backward on one micro-batch on its own node and sizes the layer's output; the profiles
are gathered and stage ``s`` is priced on the slowest of its R nodes, the link on the
bytes/s measured between the first two stages. Each process profiles under its node's
CPU quota (it joins it before, not after, its start-up), and one after the other where
the processes share one host's cores (the local cluster). A process keeps only its
stage's layers after the split (the others are freed), so a stage's memory is its own.

The loss: the schedule splits the batch and scales each micro-batch's gradients by
1/M (its ``scale_grads``), so a step's gradient is the mean over the batch, as on one
device. BatchNorm normalises each micro-batch on its own statistics (ResNet,
MobileNetV2): their losses differ from one device's by that, LeNet's do not.

Weights (``EDGEPROF_PIPE_WEIGHTS``): ``init``, the seed's fresh weights; ``train``, with
``--task infer``: the stages first train ``--epochs`` epochs as ``--task train`` does
(start-up: no step lines, no validation; its losses in the ``start`` event's
``pretrain_loss``), then stream the test set through the trained stages; or
``checkpoint``: the file ``--checkpoint`` names, the whole model's ``state_dict``, loaded
into the full model before it is cut, so each stage keeps its own layers' parameters.

Step breakdown: the stage's ``forward_one_chunk`` and ``backward_one_chunk`` are timed
(its compute), and what else the schedule spent is its time on the wire and idle
waiting for a neighbour; the per-step lines carry each part and every micro-batch's
forward and backward span, for the trace (``profiler.engines.pipeline.columns``), and the most
bytes of activations the stage held for backward at once (``stash_mb``, counted by
autograd's saved-tensor hooks around each forward: M micro-batches' worth under GPipe,
at most S under 1F1B).
"""

from __future__ import annotations

import os
import time

from profiler.errors import ConfigError

from . import optim, pipeline_split
from .node_limits import join_cpu_limit
from .torch_worker import TorchWorker, init_gloo

STAGES_ENV, MICROBATCHES_ENV = "EDGEPROF_PIPE_STAGES", "EDGEPROF_PIPE_MICROBATCHES"
SCHEDULE_ENV, SPLIT_ENV = "EDGEPROF_PIPE_SCHEDULE", "EDGEPROF_PIPE_SPLIT"
TASK_ENV, WEIGHTS_ENV = "EDGEPROF_PIPE_TASK", "EDGEPROF_PIPE_WEIGHTS"
SCHEDULES = ("gpipe", "1f1b")
TASKS = ("train", "infer")
WEIGHTS = ("init", "train")  # or a checkpoint file's
CHECKPOINT = "checkpoint"  # the environment's word for a file, given as --checkpoint
PROFILE_REPEATS = 3  # each layer timed this often on one micro-batch; the median counts
LINK_PROBE_BYTES = 1 << 20
LINK_PROBE_ROUNDS = 3


class PipelineWorker(TorchWorker):
    # What the engine (profiler.engines.pipeline) puts in the environment; without it
    # workloads.train refuses to start the process (one line, exit 2).
    rendezvous_variables = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", STAGES_ENV)

    def join(self) -> None:
        import torch.distributed as dist

        self.rank, self.num_workers = init_gloo()
        self.stages = int(os.environ[STAGES_ENV])
        self.microbatches = int(os.environ.get(MICROBATCHES_ENV, "1"))
        self.schedule_name = os.environ.get(SCHEDULE_ENV, "gpipe")
        self.split_setting = pipeline_split.parse(os.environ.get(SPLIT_ENV, "balanced"))
        self.task = os.environ.get(TASK_ENV, "train")
        weights = os.environ.get(WEIGHTS_ENV, "init")
        # A checkpoint's path is an argument (a staged input: the inventory cluster
        # ships it and rewrites the path for the node).
        self.weights_file = self.args.checkpoint if weights == CHECKPOINT else None
        # --weights train: the stages train before the stream (``prepare``).
        self.trains_first = self.task == "infer" and weights == "train"
        self.pretrain_loss: list[float] = []
        self.replicas = self.num_workers // self.stages
        self.stage, self.replica = self.rank % self.stages, self.rank // self.stages
        self.counts_samples = self.is_first
        s_count = self.stages
        # Every process makes every group, in the same order (torch's rule for new_group).
        pipes = [dist.new_group(list(range(k * s_count, (k + 1) * s_count)))
                 for k in range(self.replicas)]
        stage_groups = [dist.new_group([s + k * s_count for k in range(self.replicas)])
                        for s in range(s_count)] if self.replicas > 1 else None
        self.pipe_group = pipes[self.replica]
        self.stage_group = stage_groups[self.stage] if stage_groups else None

    def data_shard(self) -> tuple[int, int]:
        """Each pipeline trains its own shard; the stages of one pipeline the same."""
        return self.replica, self.replicas

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    def build(self) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        from . import torch_models

        args = self.args
        torch.manual_seed(args.seed)  # every process builds the same initial weights
        full = torch_models.build(args.model, args.layers, self.data.classes)
        if self.weights_file:
            load_checkpoint(full, self.weights_file, args.model)
        layers = sequential_layers(full, args.model)
        micro = max(1, args.batch // self.microbatches)
        example = torch.zeros(micro, *self.data.x_train.shape[1:])
        # The profile is this node's speed: under its CPU quota (emulated cluster), and
        # one process at a time where the stages share one host's cores (local slots).
        join_cpu_limit()
        profile = None
        for turn in range(self.num_workers if _shared_host() else 1):
            if turn == self.rank or not _shared_host():
                profile = profile_layers(layers, example)
            if _shared_host():
                dist.barrier()
        profiles = [None] * self.num_workers
        dist.all_gather_object(profiles, profile)
        link = self._link_bytes_per_s(profile.out_bytes)
        per_stage = [_slowest([profiles[s + k * self.stages] for k in range(self.replicas)])
                     for s in range(self.stages)]
        pipeline_split.check(self.split_setting, self.stages, len(layers), args.model)
        self.split = pipeline_split.choose(self.split_setting, self.stages, per_stage, link)
        bounds = [sum(self.split[:s]) for s in range(self.stages + 1)]
        first, end = bounds[self.stage], bounds[self.stage + 1]
        self.predicted_stage_s = [sum(per_stage[s].seconds[bounds[s]:bounds[s + 1]])
                                  for s in range(self.stages)]
        self.link_bytes_per_s = link
        self.stage_profiles = per_stage  # for the start event: the split can be re-checked
        self.boundary_bytes = [profile.out_bytes[bounds[s + 1] - 1]
                               for s in range(self.stages - 1)]
        self.model = torch.nn.Sequential(*layers[first:end])
        full.eval()  # the example's way to this stage moves no BatchNorm statistics
        with torch.no_grad():
            stage_input = example
            for layer in layers[:first]:
                stage_input = layer(stage_input)
        full.train()
        del full, layers  # this stage keeps its own layers only
        self.net = self.model
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.spans: list[tuple[str, int, float, float]] = []
        self.stash = [0, 0]  # activations kept for backward: bytes now, most this step
        self.pipe_stage = self.schedule = None
        trains = self.task == "train" or self.trains_first
        if self.stages > 1:  # one stage (inference alone or side by side): no pipeline
            self.pipe_stage = PipelineStage(self.model, self.stage, self.stages,
                                            torch.device("cpu"), input_args=(stage_input,),
                                            group=self.pipe_group)
            _same_dtype_handshake(self.pipe_stage)
            self.schedule_class = Schedule1F1B if self.schedule_name == "1f1b" else ScheduleGPipe
            # Inference has no loss: its last stage returns the outputs.
            self.schedule = self.schedule_class(self.pipe_stage, self.microbatches,
                                                loss_fn=self.loss_fn if trains else None)
            self._time_chunks()
            if trains:
                self._settle_metadata()
        self.lr_applied = optim.applied_lr(args.lr, args.lr_scaling, "allreduce",
                                           self.replicas)
        from .torch_sgd import SGD
        self.optimizer = SGD(self.model.parameters(), lr=self.lr_applied,
                             momentum=args.momentum, weight_decay=args.wd)

    def _settle_metadata(self) -> None:
        """One step on a batch of zeros, undone: the stage infers its neighbours' shapes
        on its first step, running its layers once on tensors it makes up, which would
        move BatchNorm's running statistics (ResNet's, MobileNetV2's) by made-up values.
        Here it happens before training, and the layers' state is put back after."""
        import torch

        saved = {name: value.clone() for name, value in self.model.state_dict().items()}
        zeros = torch.zeros(self.args.batch, *self.data.x_train.shape[1:])
        if self.is_first:
            self.schedule.step(zeros)
        elif self.is_last:
            self.schedule.step(target=torch.zeros(self.args.batch, dtype=torch.int64),
                               losses=[])
        else:
            self.schedule.step()
        self.model.load_state_dict(saved)
        self.model.zero_grad(set_to_none=True)
        self.spans.clear()

    def _time_chunks(self) -> None:
        """Record each micro-batch's forward and backward span on this stage (the
        stage object is ours: its two methods are wrapped on the instance)."""
        stage, spans, clock = self.pipe_stage, self.spans, time.perf_counter

        import torch

        stash = self.stash  # [bytes held now, most held this step]

        def pack(tensor):
            # A tensor autograd keeps for the backward pass; the weights are not stash.
            if tensor.requires_grad and tensor.is_leaf:
                return tensor, 0
            size = tensor.numel() * tensor.element_size()
            stash[0] += size
            stash[1] = max(stash[1], stash[0])
            return tensor, size

        def unpack(packed):
            tensor, size = packed
            stash[0] -= size
            return tensor

        def timed(kind: str, method):
            def call(chunk_id, *a, **kw):
                t0 = clock()
                try:
                    if kind != "fwd":
                        return method(chunk_id, *a, **kw)
                    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                        return method(chunk_id, *a, **kw)
                finally:
                    spans.append((kind, chunk_id, t0, clock()))
            return call
        stage.forward_one_chunk = timed("fwd", stage.forward_one_chunk)
        stage.backward_one_chunk = timed("bwd", stage.backward_one_chunk)

    def _link_bytes_per_s(self, out_bytes) -> float | None:
        """Bytes/s between the first two stages of pipeline 0 (a few round trips of
        1 MiB), shared with every process; None with one stage."""
        import torch
        import torch.distributed as dist

        rate = torch.zeros(1, dtype=torch.float64)
        if self.stages > 1 and self.rank in (0, 1):
            buffer = torch.zeros(LINK_PROBE_BYTES // 4)
            peer = 1 - self.rank
            t0 = time.perf_counter()
            for _ in range(LINK_PROBE_ROUNDS):
                if self.rank == 0:
                    dist.send(buffer, peer)
                    dist.recv(buffer, peer)
                else:
                    dist.recv(buffer, peer)
                    dist.send(buffer, peer)
            rate[0] = 2 * LINK_PROBE_ROUNDS * LINK_PROBE_BYTES / (time.perf_counter() - t0)
        dist.broadcast(rate, 0)
        return float(rate[0]) or None

    def parameter_count(self) -> int:
        """This stage's parameters (the cell's are the sum over one pipeline's stages)."""
        from . import torch_models

        return torch_models.count_parameters(self.model)

    def prepare(self) -> None:
        """The data and the stage; for inference, the stream: this pipeline's 1/R of the
        test set in whole batches, one pass an epoch."""
        super().prepare()
        if self.trains_first:
            self._train_first()
        if self.task == "infer":
            n = len(self.data.x_test) // self.replicas
            self.stream = slice(self.replica * n, (self.replica + 1) * n)
            self.steps_per_epoch = n // self.args.batch
            if self.steps_per_epoch == 0:
                raise ConfigError(f"{len(self.data.x_test)} test samples make no batch of "
                                  f"{self.args.batch} for each of {self.replicas} "
                                  "pipeline(s): raise --val-samples or lower --batch")
            self.tail_start = self.steps_per_epoch - max(1, self.steps_per_epoch // 4)

    def _train_first(self) -> None:
        """``--weights train``: the cell's epochs of training, as ``--task train`` runs
        them, before the stream; a start-up phase of its own (``startup_s["train"]``),
        without step lines or validation, and its steps are not the stream's syncs. The
        stream then runs on a schedule without a loss (forward only), as ``init``'s."""
        t0 = time.perf_counter()
        self.pretrain_loss = [self._train_epoch(epoch, None)[0]
                              for epoch in range(1, self.args.epochs + 1)]
        if self.schedule is not None:
            self.schedule = self.schedule_class(self.pipe_stage, self.microbatches,
                                                loss_fn=None)
        self.syncs = 0
        self.startup_s["train"] = time.perf_counter() - t0

    def start_fields(self) -> dict:
        return {"task": self.task, "stage": self.stage, "replica": self.replica,
                "stages": self.stages, "replicas": self.replicas, "microbatches": self.microbatches,
                "schedule": self.schedule_name, "split": list(self.split),
                "predicted_stage_s": [round(s, 6) for s in self.predicted_stage_s],
                "link_bytes_per_s": self.link_bytes_per_s,
                "boundary_bytes": self.boundary_bytes, "data_shards": self.replicas,
                # The profile the split was chosen from: per stage (its slowest replica),
                # each layer's forward+backward seconds; each layer's output bytes.
                "layer_s": [[round(t, 6) for t in p.seconds] for p in self.stage_profiles],
                "layer_out_bytes": list(self.stage_profiles[0].out_bytes),
                "layer_params": list(self.stage_profiles[0].params),
                "counts_samples": self.is_first,
                **({"pretrain_loss": self.pretrain_loss} if self.trains_first else {})}

    def train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        if self.task == "infer":
            return self._infer_epoch(epoch, on_first_step)
        return self._train_epoch(epoch, on_first_step)

    def _train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        import torch

        self.model.train()
        loss_sum = torch.zeros(())
        tail_sum = torch.zeros(())
        log, clock = self.step_log, time.perf_counter
        t_begin = clock()
        for step, images, labels in self.batches(epoch):
            data = torch.from_numpy(images)
            label = torch.from_numpy(labels.astype("int64", copy=False))
            t_data = clock()
            self.spans.clear()
            self.stash[:] = [0, 0]
            self.optimizer.zero_grad()
            losses: list = []
            if self.schedule is None:  # one stage (--weights train's replicas): no pipeline
                losses.append(self.loss_fn(self.model(data), label))
                losses[0].backward()
            elif self.is_first:
                self.schedule.step(data)
            elif self.is_last:
                self.schedule.step(target=label, losses=losses)
            else:
                self.schedule.step()
            t_pipe = clock()
            self._average_replicas()
            t_reduced = clock()
            self.optimizer.step()
            self.syncs += 1
            if losses:
                batch_loss = torch.stack([loss.detach() for loss in losses]).mean()
                loss_sum += batch_loss
                if step >= self.tail_start:
                    tail_sum += batch_loss
            t_end = clock()
            if log.enabled:
                fwd = sum(b - a for kind, _, a, b in self.spans if kind == "fwd")
                bwd = sum(b - a for kind, _, a, b in self.spans if kind == "bwd")
                update = t_end - t_reduced
                log.add(epoch=epoch, step=step, t=log.wall(t_begin), data_s=t_data - t_begin,
                        compute_s=fwd + bwd + update,
                        exchange_s=(t_pipe - t_data - fwd - bwd) + (t_reduced - t_pipe),
                        step_s=t_end - t_begin, fwd_s=fwd, bwd_s=bwd, update_s=update,
                        pipe_s=t_pipe - t_data, allreduce_s=t_reduced - t_pipe,
                        # The most activations this stage held for backward at once.
                        stash_mb=round(self.stash[1] / 2**20, 3),
                        spans=self._span_rows(t_begin))
            if on_first_step is not None:
                on_first_step()
                on_first_step = None
            t_begin = clock()
        return self._pipeline_losses(loss_sum, tail_sum)

    def _infer_epoch(self, epoch: int, on_first_step) -> tuple[None, None]:
        """One pass of the stream through the stages, forward only. A batch's step is
        its latency: from entering stage 0 to leaving the last (each stage's ``pipe_s``;
        the last stage's is the whole pipeline's)."""
        import torch

        self.model.eval()
        log, clock = self.step_log, time.perf_counter
        x, y = self.data.x_test[self.stream], self.data.y_test[self.stream]
        batch = self.args.batch
        self.correct = self.counted = 0
        t_begin = clock()
        for step in range(self.steps_per_epoch):
            rows = slice(step * batch, (step + 1) * batch)
            data = torch.from_numpy(self.data.normalize(x[rows]))
            t_data = clock()
            self.spans.clear()
            out = None
            with torch.no_grad():
                if self.schedule is None:
                    out = self.model(data)
                elif self.is_first:
                    self.schedule.eval(data)
                else:
                    out = self.schedule.eval()
            if self.is_last:
                self.correct += int((out.argmax(dim=1).numpy() == y[rows]).sum())
                self.counted += batch
            self.syncs += 1
            t_end = clock()
            if log.enabled:
                fwd = (sum(b - a for kind, _, a, b in self.spans if kind == "fwd")
                       if self.schedule is not None else t_end - t_data)
                log.add(epoch=epoch, step=step, t=log.wall(t_begin), data_s=t_data - t_begin,
                        compute_s=fwd, exchange_s=t_end - t_data - fwd,
                        step_s=t_end - t_begin, fwd_s=fwd, bwd_s=0.0, update_s=0.0,
                        pipe_s=t_end - t_data, allreduce_s=0.0, stash_mb=0.0,
                        spans=self._span_rows(t_begin))
            if on_first_step is not None:
                on_first_step()
                on_first_step = None
            t_begin = clock()
        self.model.train()
        return None, None

    def _span_rows(self, t_begin: float) -> list:
        """Each micro-batch's forward or backward this step: kind, micro-batch, start
        after the step's, length (s): the trace's stage track."""
        return [[kind, chunk, round(a - t_begin, 6), round(b - a, 6)]
                for kind, chunk, a, b in self.spans]

    def _average_replicas(self) -> None:
        """The mean of this stage's gradients over its R replicas (one flat allreduce)."""
        if self.stage_group is None:
            return
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.stage_group)
        flat /= self.replicas
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def _pipeline_losses(self, loss_sum, tail_sum) -> tuple[float, float]:
        """The epoch's losses as the last stage of pipeline 0 saw them, for every
        process of the cell (one broadcast an epoch)."""
        import torch
        import torch.distributed as dist

        values = torch.stack([loss_sum / self.steps_per_epoch,
                              tail_sum / (self.steps_per_epoch - self.tail_start)]
                             ).to(torch.float64)
        dist.broadcast(values, self.stages - 1)
        return float(values[0]), float(values[1])

    def epoch_accuracy(self) -> float | None:
        """Pipeline 0 streams the test set through its stages (forward only); its last
        stage counts, and rank 0 reports it. Every process takes part in the broadcast."""
        import torch
        import torch.distributed as dist

        if self.task == "infer":  # the stream's own outputs, every pipeline's
            counts = torch.tensor([float(self.correct), float(self.counted)],
                                  dtype=torch.float64)
            dist.all_reduce(counts)
            if self.rank != 0:
                return None
            return float(counts[0] / counts[1]) if counts[1] else None
        correct = torch.zeros(1, dtype=torch.float64)
        counted = 0
        if self.replica == 0:
            self.model.eval()
            with torch.no_grad():
                for images, labels in self.test_batches():
                    if len(images) != self.args.batch:
                        continue  # the stages' buffers are shaped for a whole batch
                    counted += len(images)
                    if self.is_first:
                        self.schedule.eval(torch.from_numpy(images))
                    elif self.is_last:
                        # The schedule computes its loss on the last stage: it needs
                        # the labels even when only the outputs are wanted.
                        out = self.schedule.eval(
                            target=torch.from_numpy(labels.astype("int64", copy=False)))
                        correct += float((out.argmax(dim=1).numpy() == labels).sum())
                    else:
                        self.schedule.eval()
            self.model.train()
        if self.is_last and counted:
            correct /= counted
        dist.broadcast(correct, self.stages - 1)
        return float(correct[0]) if self.rank == 0 else None


def load_checkpoint(model, path: str, name: str) -> None:
    """The whole model's ``state_dict`` from ``path`` into ``model``; a file that does
    not fit it is one line (the controller checked it before the sweep: this is for a
    file given through the Python API or changed since)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - torch's own words, on one line
        text = " ".join(str(exc).split())
        raise ConfigError(f"--weights {path} does not load into {name} "
                          f"({type(exc).__name__}: {text[:200]}): save the state_dict of the "
                          "model the cell trains") from None


def sequential_layers(model, name: str) -> list:
    """The modules a pipeline cuts between: a ``torch.nn.Sequential``'s children."""
    import torch

    if not isinstance(model, torch.nn.Sequential):
        raise ConfigError(f"{name} is a {type(model).__name__}, not a torch.nn.Sequential: "
                          "a pipeline cuts a model between the layers of a Sequential; "
                          "return one from the factory")
    return list(model.children())


def profile_layers(layers, example) -> pipeline_split.LayerCosts:
    """Each layer's forward+backward seconds on ``example`` (one micro-batch), its
    output's bytes and its parameters, measured on this node."""
    import copy
    import statistics

    import torch

    seconds, out_bytes, params = [], [], []
    x = example
    for original in layers:
        layer = copy.deepcopy(original)  # the model's BatchNorm statistics stay untouched
        times = []
        for _ in range(PROFILE_REPEATS):
            inp = x.detach().requires_grad_(True)
            t0 = time.perf_counter()
            out = layer(inp)
            out.backward(torch.ones_like(out))
            times.append(time.perf_counter() - t0)
        seconds.append(statistics.median(times))
        out_bytes.append(out.numel() * out.element_size())
        params.append(sum(p.numel() for p in layer.parameters() if p.requires_grad))
        x = out.detach()
    return pipeline_split.LayerCosts(tuple(seconds), tuple(out_bytes), tuple(params))


def _same_dtype_handshake(stage) -> None:
    """torch 2.9 (the Pi's 2.9.1) opens a stage's links to its neighbours by sending an
    int64 scalar into a float32 buffer (pytorch#165143, fixed by #165539 in later torch):
    Gloo aborts the process on the 8 bytes that do not fit 4 ("op.preamble.length <=
    op.nbytes. 8 vs 4"). Both ends here send and receive one float32, as later torch
    does itself (there this changes nothing)."""
    import torch

    make_ops = getattr(stage, "_get_init_p2p_neighbors_ops", None)
    if make_ops is None:  # a torch without that handshake
        return

    def ops():
        found = make_ops()
        for op in found:
            op.tensor = op.tensor.to(torch.float32).reshape(1)
        return found
    stage._get_init_p2p_neighbors_ops = ops


def _shared_host() -> bool:
    """Whether the cell's processes share this host (the local cluster's slots)."""
    return os.environ.get("MASTER_ADDR", "").startswith("127.")


def _slowest(profiles) -> pipeline_split.LayerCosts:
    """One stage's replicas' profiles as one: each layer at its slowest node's time."""
    if len(profiles) == 1:
        return profiles[0]
    return pipeline_split.LayerCosts(
        tuple(max(times) for times in zip(*(p.seconds for p in profiles))),
        profiles[0].out_bytes, profiles[0].params)
