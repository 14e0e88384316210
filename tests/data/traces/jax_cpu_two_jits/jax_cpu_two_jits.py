"""The program that recorded run_fast.xplane.pb.gz and run_slow.xplane.pb.gz (JAX 0.10.2,
CPU backend).

    python jax_cpu_two_jits.py OUTDIR [slow]      (once per run; see README.md)

Profiles 8 ``train`` steps (``StepTraceAnnotation``), each calling two jitted functions
whose XLA ops share names (``ynn_fusion``, ``wrapped_tanh``...): ``augment``, a 4-trip
``lax.scan`` of a matmul and a tanh over the batch's first N features, and
``train_step``, an MLP's SGD step. ``slow`` makes ``augment`` alone slower (N 64 ->
384); ``train_step`` is the same program in both runs. Both are compiled before the
profile starts. Prints the time of each step (ms) as JSON.
"""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

D, STEPS, TRIPS = 128, 8, 4
N = 384 if "slow" in sys.argv[2:] else 64


def mlp(p, x):
    h = jax.nn.relu(x @ p["w1"])
    return h @ p["w2"]


def loss_fn(p, x, y):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(mlp(p, x)) * jax.nn.one_hot(y, 10), -1))


@jax.jit
def train_step(p, x, y):
    l, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), l


@jax.jit
def augment(x, m):
    def body(c, _):
        return jnp.tanh(c @ m), None
    c0 = x[:, :N] if N <= D else jnp.tile(x, (1, N // D))
    c, _ = jax.lax.scan(body, c0, None, length=TRIPS)
    return x + 0.01 * jnp.mean(c)


rng = np.random.default_rng(0)
p = {"w1": jnp.asarray(rng.standard_normal((D, 256), np.float32) * 0.05),
     "w2": jnp.asarray(rng.standard_normal((256, 10), np.float32) * 0.05)}
m = jnp.asarray(rng.standard_normal((N, N), np.float32) * 0.01)
xs = jnp.asarray(rng.standard_normal((32, D), np.float32))
ys = jnp.asarray(rng.integers(0, 10, 32))
p2, _ = train_step(p, augment(xs, m), ys)  # compiled before the profile starts
jax.block_until_ready(p2)
times = []
with jax.profiler.trace(sys.argv[1]):
    for i in range(STEPS):
        t0 = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            x = augment(xs, m)
            p, l = train_step(p, x, ys)
            l.block_until_ready()
        times.append(round((time.perf_counter() - t0) * 1e3, 3))
print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend(), "N": N, "step_ms": times}))
