"""What a user's unchanged script did, seen through PyTorch's own global hooks.

``workloads.script_launcher`` runs the script; before it does, ``install`` registers
(and nothing in the script is patched):

- ``torch.nn.modules.module.register_module_forward_pre_hook`` and
  ``register_module_forward_hook`` (``always_call``, so that a forward that raises
  still unwinds): a depth count tells the *top-level* call (the one the script makes)
  from the calls of submodules inside it. A top-level call of a module with parameters,
  in training mode with autograd on, is a training forward: the first one of a step
  ends its data phase and gives the batch size (its first positional tensor's first
  dimension). A top-level call without autograd or in eval mode is evaluation: the
  next step begins after it, so validation is no step's time.
- ``torch.optim.optimizer.register_optimizer_step_pre_hook`` and ``_post_hook``: a
  step ends where its optimizer step ends. Optimizer steps with no training forward
  between them (two optimizers, a GAN's) are one step: a step is closed, and its line
  written, only when the next one's first forward comes, the script logs an epoch, or
  it ends. The time inside them is the line's ``optimizer_s`` (a part of
  ``compute_s``; only script cells have it), so that forward+backward, what a script
  times itself, is ``compute_s + exchange_s - optimizer_s``.
- A communication hook on every ``DistributedDataParallel``: PyTorch has no global hook
  for a DDP's construction, so the forward pre-hook registers it the first time a DDP
  is called, which is before its first backward, as ``register_comm_hook`` requires,
  and late enough that a hook the script registers itself (right after construction,
  as DDP's docs show) is left alone (then this one is not installed: see below). It
  is DDP's default allreduce (averaging) with a note of when each bucket was launched,
  the torch-ddp engine's hook (``workloads.torch_ddp``), on the DDP's own process
  group. From inside it an autograd
  callback is queued that queues a second one: DDP queues its own end-of-backward
  callback (which waits for the allreduce futures and writes the gradients back) when
  the last bucket is ready, after the hook's, and the second callback runs after
  DDP's, i.e. where ``loss.backward()`` returns (checked: within 0.1 ms of it).

A step's line (``workloads.steps``): ``t`` where it began (the later of the previous
step's end, the end of evaluation after it, an ``edgeprof_hooks.log`` call), ``data_s``
from there to its first training forward, ``exchange_s`` the time backward spent after
its last bucket was launched (waiting for the allreduce: what the torch-ddp engine
counts), ``step_s`` to the end of its last optimizer step, and ``compute_s`` the rest
(forward, backward's compute, whatever the script does between backward and the
optimizer, the optimizer step). The first step has no data phase (there is no previous
step to measure it from).

Epochs come from ``edgeprof_hooks.log`` only (a script's epoch loop is invisible to
hooks): each call closes the epoch, and the steps after it count from 0 in the next.
An epoch's ``epoch_s`` runs from the previous call (the first step's begin, for the
first) to the end of its last step: the validation a script runs before it logs is not
in it, as the built-in workers measure accuracy outside ``epoch_s``. A script that never
calls it ran one epoch as far as the hooks know: its ``end`` carries that epoch's
``first_step_s`` beside ``train_s`` (its first step's begin to its last step's end), so
that the controller's steady step time, and the breakdown's check against it, need no
``log`` call (``profiler.timeline.steps``).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from .events import NODE_ENV, maxrss_mb
from .steps import StepLog

def batch_size(inputs: tuple) -> int | None:
    """The first dimension of the first tensor among a call's positional inputs."""
    for value in inputs:
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return None


def plain(value: Any) -> Any:
    """A logged value as JSON holds it: a one-element tensor or NumPy scalar as a
    number, NaN and infinities as text (results.jsonl stays strict JSON)."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class StepRecorder:
    """Turns the hooks' instants (``time.perf_counter``) into step lines and events.

    Pure bookkeeping, no torch: the hooks call ``training_forward``, ``evaluated``,
    ``bucket_launched``, ``backward_ended`` and ``optimizer_stepped``;
    ``edgeprof_hooks.log`` calls ``log``; the launcher calls ``finish`` or ``error``.
    """

    def __init__(self, events, step_log: StepLog, *, world_size: int = 1,
                 breakdown: str = "on", script: str = "", startup_s: dict | None = None,
                 clock=time.perf_counter):
        self.events, self.step_log, self.clock = events, step_log, clock
        self.world_size, self.breakdown, self.script = world_size, breakdown, script
        self.startup_s = dict(startup_s or {})
        self.t_launched = clock()  # the script starts (run_path) now
        self.started = False
        self.comm = "local"
        self.param_count: int | None = None
        # The open step: where it may begin, its first training forward, its exposed
        # exchange so far, the last bucket launched in the backward under way.
        self.t_free = None  # the latest instant the next step cannot begin before
        self.t_forward = None
        self.t_last_launch = None
        self.exchange_s = self.optimizer_s = 0.0
        self.t_optimizer_begin = None
        self.batch = None
        self.t_optimizer_end = None  # set: a step awaits its close
        self.t_step_begin = None
        # Counts.
        self.epoch, self.step = 1, 0
        self.steps = self.samples = 0
        self.samples_known = True
        self.epoch_steps = self.epoch_samples = 0
        self.t_epoch_begin = None
        self.t_first_step_end = None
        self.t_train_begin = self.t_train_end = None
        self.epochs_logged = 0
        self.first_epoch_steps = None  # steps of the first logged epoch
        self.accuracy_reported = False
        self.train_s_logged = 0.0

    # -- what the hooks report -------------------------------------------------------
    def training_forward(self, batch: int | None, module=None) -> None:
        now = self.clock()
        if self.t_optimizer_end is not None:
            self._close_step()
        if self.t_forward is not None:
            return  # a later forward of the same step (gradient accumulation, a loss)
        if not self.started:
            self._start(module, batch)
        self.t_forward = now
        self.t_step_begin = now if self.t_free is None else min(now, self.t_free)
        if self.t_train_begin is None:
            self.t_train_begin = self.t_epoch_begin = now
        self.batch = batch

    def evaluated(self) -> None:
        """A top-level forward without training ended: no step's time before now."""
        if self.t_optimizer_end is not None:
            self._close_step()
        if self.t_forward is None:
            self.t_free = self.clock()

    def bucket_launched(self) -> bool:
        """DDP launched a bucket's allreduce; whether it is this backward's first."""
        first = self.t_last_launch is None
        self.t_last_launch = self.clock()
        return first

    def backward_ended(self) -> None:
        if self.t_last_launch is not None:
            self.exchange_s += max(0.0, self.clock() - self.t_last_launch)
            self.t_last_launch = None

    def optimizer_starting(self) -> None:
        self.t_optimizer_begin = self.clock()

    def optimizer_stepped(self) -> None:
        now = self.clock()
        if self.t_optimizer_begin is not None:
            self.optimizer_s += now - self.t_optimizer_begin
            self.t_optimizer_begin = None
        if self.t_forward is None:  # no forward seen (functional code): no data phase
            if self.t_optimizer_end is not None:
                self.t_optimizer_end = now  # one more optimizer of the same step
                return
            if not self.started:
                self._start(None, None)
            begin = self.t_free if self.t_free is not None else self.t_launched
            self.t_forward = self.t_step_begin = begin
            if self.t_train_begin is None:
                self.t_train_begin = self.t_epoch_begin = begin
        self.t_optimizer_end = now
        if self.t_first_step_end is None:
            self.t_first_step_end = now
            self.events.emit("first_step")

    # -- edgeprof_hooks.log ------------------------------------------------------------
    def log(self, values: dict[str, Any]) -> None:
        if self.t_optimizer_end is not None:
            self._close_step()
        now = self.clock()
        epoch = values.get("epoch")
        epoch = self.epoch if not isinstance(epoch, int) or isinstance(epoch, bool) else epoch
        fields = {name: plain(value) for name, value in values.items() if name != "epoch"}
        fields.setdefault("val_accuracy", None)
        if fields["val_accuracy"] is not None:
            self.accuracy_reported = True
        begin = self.t_epoch_begin if self.t_epoch_begin is not None else self.t_launched
        # To the end of the epoch's last step: the validation before this call is not in
        # it (module docstring).
        end = self.t_train_end if self.epoch_steps and self.t_train_end else now
        epoch_s = end - begin
        if self.epochs_logged == 0 and self.t_first_step_end is not None:
            fields["first_step_s"] = self.t_first_step_end - begin
        self.train_s_logged += epoch_s
        self.step_log.flush()  # outside any step's timing
        self.events.emit("epoch", epoch=epoch, epoch_s=epoch_s, steps=self.epoch_steps,
                         samples=self.epoch_samples if self.samples_known else None,
                         **fields)
        self.epochs_logged += 1
        if self.first_epoch_steps is None:
            self.first_epoch_steps = self.epoch_steps
        self.epoch, self.step = epoch + 1, 0
        self.epoch_steps = self.epoch_samples = 0
        self.t_epoch_begin = self.t_free = self.clock()

    # -- the end -------------------------------------------------------------------------
    def finish(self) -> dict:
        """The script ended well: the last step's line and the ``end`` event."""
        self._wind_up()
        if not self.started:
            self._start(None, None)
        train_s = self._train_s()
        # No step seen (no torch.optim): the samples are unknown, not none; the rate is
        # 0 all the same, as the results' sum over workers needs a number.
        samples = self.samples if self.samples_known and self.steps else None
        rate = samples / train_s if samples and train_s else 0.0
        unlogged = {}
        if not self.epochs_logged and self.t_first_step_end is not None:
            # The run was one epoch: its first step, as a logged first epoch says it.
            unlogged["first_step_s"] = self.t_first_step_end - self.t_train_begin
        return self.events.emit(
            "end", elapsed_s=time.time() - self.t_wall_start, train_s=train_s,
            steps=self.steps, samples=samples, samples_per_s=rate,
            syncs=self.steps, steps_per_epoch=self.first_epoch_steps,
            epochs_logged=self.epochs_logged, accuracy_reported=self.accuracy_reported,
            **unlogged, **maxrss_mb())

    def error(self, kind: str, message: str, exit_status: int | None) -> dict:
        """The script failed: the steps timed so far, and the ``error`` event."""
        self._wind_up()
        return self.events.emit("error", kind=kind, message=message, **maxrss_mb(),
                                exit_status=exit_status, steps=self.steps)

    # -- inside ----------------------------------------------------------------------------
    def _start(self, module, batch: int | None) -> None:
        self.started = True
        self.t_wall_start = time.time()
        if module is not None:
            self.param_count = sum(p.numel() for p in module.parameters()
                                   if p.requires_grad)
        startup = dict(self.startup_s, script=self.clock() - self.t_launched)
        self.events.emit("start", num_workers=self.world_size, framework="torch",
                         node=os.environ.get(NODE_ENV), pid=os.getpid(),
                         breakdown=self.breakdown, comm=self.comm, script=self.script,
                         batch=batch, param_count=self.param_count,
                         startup_s={k: round(v, 3) for k, v in startup.items()
                                    if v is not None})

    def _close_step(self) -> None:
        end, begin = self.t_optimizer_end, self.t_step_begin
        data_s = self.t_forward - begin
        step_s = end - begin
        exchange_s = min(self.exchange_s, step_s - data_s)
        self.step_log.add(epoch=self.epoch, step=self.step, t=self.step_log.wall(begin),
                          data_s=data_s, compute_s=step_s - data_s - exchange_s,
                          exchange_s=exchange_s, step_s=step_s,
                          optimizer_s=self.optimizer_s)
        self.step += 1
        self.steps += 1
        self.epoch_steps += 1
        if self.batch is None:
            self.samples_known = False
        else:
            self.samples += self.batch
            self.epoch_samples += self.batch
        self.t_train_end = end
        self.t_free = end
        self.t_forward = self.t_optimizer_end = self.batch = None
        self.exchange_s = self.optimizer_s = 0.0

    def _wind_up(self) -> None:
        if self.t_optimizer_end is not None:
            self._close_step()
        self.step_log.flush()

    def _train_s(self) -> float:
        """Logged epochs' time, or first step's begin to last step's end unlogged."""
        if self.epochs_logged:
            return self.train_s_logged
        if self.t_train_begin is None or self.t_train_end is None:
            return 0.0
        return self.t_train_end - self.t_train_begin


class Hooks:
    """PyTorch's global hooks, feeding a ``StepRecorder``; ``remove()`` takes them out."""

    def __init__(self, recorder: StepRecorder, timed_comm: bool = True):
        import torch
        from torch.nn.modules import module as nn_module
        from torch.nn.parallel import DistributedDataParallel
        from torch.optim import optimizer

        self.recorder, self.timed_comm = recorder, timed_comm
        self._torch, self._ddp_class = torch, DistributedDataParallel
        self.depth = 0
        self.hooked_ddp: list = []  # DDPs given the timing hook (kept: ids are reused)
        self.foreign_ddp = 0  # DDPs with a hook of the script's own
        self.handles = [
            nn_module.register_module_forward_pre_hook(self._forward_pre),
            nn_module.register_module_forward_hook(self._forward_post, always_call=True),
            optimizer.register_optimizer_step_pre_hook(self._optimizer_pre),
            optimizer.register_optimizer_step_post_hook(self._optimizer_post),
        ]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _forward_pre(self, module, inputs) -> None:
        self.depth += 1
        if self.depth != 1:
            return
        if isinstance(module, self._ddp_class):
            self._watch_ddp(module)
        if (module.training and self._torch.is_grad_enabled()
                and next(module.parameters(), None) is not None):
            self.recorder.training_forward(batch_size(inputs), module)

    def _forward_post(self, module, inputs, output) -> None:
        self.depth -= 1
        if self.depth == 0 and not (module.training and self._torch.is_grad_enabled()):
            self.recorder.evaluated()

    def _optimizer_pre(self, optimizer, args, kwargs) -> None:
        self.recorder.optimizer_starting()

    def _optimizer_post(self, optimizer, args, kwargs) -> None:
        self.recorder.optimizer_stepped()

    def _watch_ddp(self, ddp) -> None:
        if any(ddp is seen for seen in self.hooked_ddp):
            return
        self.hooked_ddp.append(ddp)
        self.recorder.comm = "allreduce"
        if not self.timed_comm:
            return
        if ddp._comm_hooks:  # the script's own hook: DDP takes one only
            self.foreign_ddp += 1
            return
        try:
            # The DDP's own group: a script may train on a subgroup.
            ddp.register_comm_hook(ddp.process_group, self._timed_allreduce)
        except RuntimeError:  # a built-in hook of the script's (not in _comm_hooks)
            self.foreign_ddp += 1

    def _timed_allreduce(self, process_group, bucket):
        from torch.autograd import Variable
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if self.recorder.bucket_launched():
            engine = Variable._execution_engine
            # This callback runs before DDP's end-of-backward one (queued after this
            # hook); the one it queues runs after DDP's (module docstring).
            engine.queue_callback(lambda: engine.queue_callback(self.recorder.backward_ended))
        return default_hooks.allreduce_hook(process_group, bucket)
