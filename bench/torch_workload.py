"""The small CPU training loop the torch stop benchmarks record (torch_stop.py,
torch_stop_phases.py): an MLP, three sections per step, the same in both."""

from __future__ import annotations

from typing import Any, Callable

import torch


def training_loop(steps: int, width: int = 256) -> Callable[[Callable[[str], Any]], None]:
    """``loop(section)``: ``steps`` training steps, each in the sections ``forward``,
    ``backward`` and ``optimizer`` made by ``section(name)`` (a context manager)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, width), torch.randn(64, 1)

    def loop(section: Callable[[str], Any]) -> None:
        for _ in range(steps):
            with section("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with section("backward"):
                opt.zero_grad()
                loss.backward()
            with section("optimizer"):
                opt.step()

    return loop
