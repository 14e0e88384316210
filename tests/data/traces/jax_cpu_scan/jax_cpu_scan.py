"""The program that recorded run_a/ and run_b/ (JAX 0.10.2, CPU backend).

    python jax_cpu_scan.py OUTDIR      (once per run; see README.md)

Profiles 6 ``train`` steps of one jitted step whose work is a 5-trip ``lax.scan`` (a
``while``) of two 64x64 matmuls, a 2-trip ``lax.fori_loop`` nested in its body (a
``while`` in the ``while``) and a ``lax.cond`` (a ``conditional``), with
``jax.profiler.trace(OUTDIR)``, and prints the time of each step (ms) as JSON.
"""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

TRIPS, INNER, STEPS = 5, 2, 6


@jax.jit
def step(w1, w2, h):
    def body(c, _):
        c = jnp.tanh(c @ w1)
        c = lax.fori_loop(0, INNER, lambda i, x: jnp.tanh(x @ w2), c)
        c = lax.cond(c.sum() > 0, lambda x: x * 0.5, lambda x: x * 2.0, c)
        return c, None
    return lax.scan(body, h, None, length=TRIPS)[0]


rng = np.random.default_rng(0)
w1, w2, h = (jnp.asarray(rng.standard_normal(s, np.float32) * 0.1) for s in ((64, 64), (64, 64), (32, 64)))
step(w1, w2, h).block_until_ready()  # compiled before the profile starts
times = []
with jax.profiler.trace(sys.argv[1]):
    for i in range(STEPS):
        t0 = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            h = step(w1, w2, h).block_until_ready()
        times.append(round((time.perf_counter() - t0) * 1e3, 3))
print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend(), "step_ms": times}))
