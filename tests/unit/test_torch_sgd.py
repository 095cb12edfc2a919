"""``workloads.torch_sgd.SGD`` updates the weights bit for bit as ``torch.optim.SGD`` does,
and a torch worker's training never imports ``torch._dynamo`` (68 MB and 0.8 CPU-s a
process, which ``torch.optim.SGD`` costs on its first step)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import need

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def torch():
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    import torch
    return torch


@pytest.mark.parametrize("momentum,wd", [(0.9, 1e-4), (0.0, 0.0), (0.5, 0.0)])
def test_the_same_weights_as_torch_optim_sgd_bit_for_bit(torch, momentum, wd):
    from workloads import torch_models
    from workloads.torch_sgd import SGD

    nets = []
    for _ in range(2):
        torch.manual_seed(3)
        nets.append(torch_models.build("lenet-cnn", None))
    ours = SGD(nets[0].parameters(), lr=0.05, momentum=momentum, weight_decay=wd)
    theirs = torch.optim.SGD(nets[1].parameters(), lr=0.05, momentum=momentum,
                             weight_decay=wd)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        x = torch.randn(8, 1, 32, 32, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        for net, opt in zip(nets, (ours, theirs)):
            if opt is ours:
                opt.zero_grad()
            else:
                opt.zero_grad(set_to_none=False)
            loss_fn(net(x), y).backward()
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in
               zip(nets[0].parameters(), torch_models.build("lenet-cnn", None).parameters()))


def test_zero_grad_keeps_the_gradient_tensors(torch):
    """The parameter server's workers keep their gradients as views of one flat buffer:
    zeroing must not replace them."""
    from workloads.torch_sgd import SGD

    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    grad = p.grad
    SGD([p], lr=0.1).zero_grad()
    assert p.grad is grad and float(grad.sum()) == 0.0


def test_a_torch_worker_trains_without_importing_dynamo(torch, tmp_path):
    """One device, a real epoch of ``workloads.train`` in a fresh process, then
    ``sys.modules`` is asked."""
    probe = ("import sys\n"
             "from workloads import train\n"
             f"args = ['--framework', 'torch', '--model', 'lenet-mlp', '--batch', '32', "
             f"'--max-samples', '256', '--val-samples', '64', '--dataset', 'synthetic', "
             f"'--events-dir', {str(tmp_path)!r}]\n"
             "worker = train.worker_class('torch', 'local')(train.parse_args(args))\n"
             "from workloads.events import EventWriter\n"
             "events = EventWriter(worker.args.events_dir, 0)\n"
             "worker.prepare(); worker.run(events); events.close()\n"
             "print(worker.syncs, 'torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8", "False"]
