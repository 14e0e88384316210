"""A JAX CPU program's XSpace, bigger than the shared samples: ``STEPS`` training steps of
a small four-layer MLP (jit-compiled gradient, 256x256 weights, batch 64), each in a
``StepTraceAnnotation``, profiled by ``jax.profiler``. 3000 steps write ~16 MB and
~550k events. Prints the .xplane.pb it wrote.

    python bench/jax_cpu_profile.py OUT_DIR [STEPS]
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import jax
    import jax.numpy as jnp

    out, steps = Path(argv[0]), int(argv[1]) if len(argv) > 1 else 3000

    def loss(w: jax.Array, x: jax.Array) -> jax.Array:
        for _ in range(4):
            x = jnp.tanh(x @ w)
        return x.sum()

    grad = jax.jit(jax.grad(loss))
    w, x = jnp.ones((256, 256)) * 0.01, jnp.ones((64, 256))
    grad(w, x).block_until_ready()  # compiled before the profile
    jax.profiler.start_trace(str(out))
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = w - 0.1 * grad(w, x)
    w.block_until_ready()
    jax.profiler.stop_trace()
    print(max(out.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
