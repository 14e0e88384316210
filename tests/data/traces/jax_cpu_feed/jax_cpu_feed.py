"""A JAX CPU program whose second jitted function reads the first's output (JAX 0.10.2).

    python jax_cpu_feed.py OUTDIR      (see README.md)

Profiles 8 ``train`` steps (``StepTraceAnnotation``), each calling ``produce`` (module
``jit_produce``: a 6-trip ``lax.scan`` of a 256x256 matmul and a tanh) and then
``consume`` (module ``jit_consume``: ``w - 0.1 tanh(h^T h / 100) w`` of ``h = tanh(c w)``,
a chain of three matmuls on ``produce``'s output ``c``), then blocking on ``consume``'s
result. JAX dispatches both at once; XLA's CPU client runs ``consume`` when ``produce``
is done, on whichever of its pool threads is free. Both are compiled before the profile
starts. Prints each step's time (ms) as JSON.
"""
import json
import sys
import time

import jax
import jax.numpy as jnp

N, TRIPS, STEPS = 256, 6, 8


@jax.jit
def produce(x):
    def body(c, _):
        return jnp.tanh(c @ c.T * 0.01) + c, None
    c, _ = jax.lax.scan(body, x, None, length=TRIPS)
    return c


@jax.jit
def consume(w, c):
    h = jnp.tanh(c @ w)
    return w - 0.1 * jnp.tanh((h.T @ h) * 0.01) @ w


x = jax.random.normal(jax.random.PRNGKey(0), (N, N))
w = jnp.ones((N, N)) * 0.01
w = consume(w, produce(x)).block_until_ready()  # compiled before the profile starts
times = []
jax.profiler.start_trace(sys.argv[1])
for i in range(STEPS):
    t0 = time.perf_counter()
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w = consume(w, produce(x))
        w.block_until_ready()
    times.append(round((time.perf_counter() - t0) * 1e3, 3))
jax.profiler.stop_trace()
print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend(), "step_ms": times}))
