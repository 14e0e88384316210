"""A small training-like pipeline: a loader thread feeds batches through a queue,
the main thread runs forward / backward / optimizer steps on NumPy arrays.
Sections in two threads, steps, a counter: everything the host plugin records.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np

import polyprof


def loader(batches: "queue.Queue[np.ndarray | None]", steps: int, batch: int, dim: int) -> None:
    rng = np.random.default_rng(0)
    for _ in range(steps):
        with polyprof.section("load batch"):
            with polyprof.section("read"):
                time.sleep(0.002)  # stands in for disk / network I/O
            with polyprof.section("augment"):
                x = rng.standard_normal((batch, dim)).astype(np.float32)
                x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)
        batches.put(x)
    batches.put(None)


def train(steps: int = 20, batch: int = 256, dim: int = 512, hidden: int = 1024) -> float:
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((dim, hidden)).astype(np.float32) * 0.01
    w2 = rng.standard_normal((hidden, 1)).astype(np.float32) * 0.01
    batches: "queue.Queue[np.ndarray | None]" = queue.Queue(maxsize=4)
    t = threading.Thread(target=loader, args=(batches, steps, batch, dim), name="loader")
    t.start()
    loss = 0.0
    while True:
        with polyprof.section("wait for data"):
            x = batches.get()
        if x is None:
            break
        with polyprof.section("train step"):
            with polyprof.section("forward"):
                h = np.maximum(x @ w1, 0)
                y = h @ w2
                loss = float((y ** 2).mean())
            with polyprof.section("backward"):
                gy = 2 * y / len(y)
                gw2 = h.T @ gy
                gh = (gy @ w2.T) * (h > 0)
                gw1 = x.T @ gh
            with polyprof.section("optimizer"):
                w1 -= 0.01 * gw1
                w2 -= 0.01 * gw2
        polyprof.counter("loss", loss)
        polyprof.step()
    t.join()
    return loss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    loss = train(args.steps)
    print(f"final loss {loss:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
