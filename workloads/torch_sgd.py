"""SGD with momentum and weight decay for the torch workers and parameter servers,
through ``torch.optim.sgd.sgd``, the functional form that ``torch.optim.SGD`` itself calls.

Why not ``torch.optim.SGD``: its ``step``, ``zero_grad`` and ``add_param_group`` import
``torch._dynamo`` on their first call (``torch._disable_dynamo`` and the graph breaks of
``_use_grad_for_differentiable``, there for ``torch.compile``), which pulls in 800
modules, SymPy and Inductor among them, for nothing in eager mode: measured here on
torch 2.13.0+cpu, 68 MB of resident memory per process and 0.8 CPU-seconds (a quarter of
a torch worker's memory on top of the import, and on a parameter server that joined its
node's CPU quota before building its optimizer, seconds of start-up at a Pi 3B's
quota). The update is the same code (``_single_tensor_sgd`` on CPU, as
``torch.optim.SGD`` chooses there), so the weights are bit for bit those of
``torch.optim.SGD``; ``tests/unit/test_torch_sgd.py`` checks it.
"""

from __future__ import annotations


class SGD:
    """``torch.optim.SGD(params, lr, momentum, weight_decay=wd)`` without ``torch._dynamo``:
    ``step()`` after the gradients are in ``p.grad``, ``zero_grad()`` zeroes them in
    place (the gradients stay the same tensors, as ``set_to_none=False``)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        # None until the first step, which starts each buffer as that step's gradient.
        self.momentum_buffers: list = [None] * len(self.params)

    def step(self) -> None:
        import torch
        from torch.optim.sgd import sgd

        with_grad = [i for i, p in enumerate(self.params) if p.grad is not None]
        buffers = [self.momentum_buffers[i] for i in with_grad]
        with torch.no_grad():
            sgd([self.params[i] for i in with_grad], [self.params[i].grad for i in with_grad],
                buffers, foreach=False, weight_decay=self.weight_decay,
                momentum=self.momentum, lr=self.lr, dampening=0.0, nesterov=False,
                maximize=False)
        for i, buffer in zip(with_grad, buffers):
            self.momentum_buffers[i] = buffer  # set by sgd on the first step

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()
