"""The program that recorded jax_cpu_mlp_scan.xplane.pb (JAX 0.10.2, CPU backend):
``python jax_cpu_mlp_scan.py DIR`` profiles 3 steps of a 2-layer MLP's gradient and a
4-trip ``lax.scan`` into DIR and prints XLA's cost analysis of both programs as JSON
(jax_cpu_mlp_scan.cost_analysis.json). tests/test_hlo_costs_cpu.py runs it too."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

TRIPS = 4


def loss(p, x):
    w1, b1, w2, b2 = p
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 + b2) ** 2)


def rnn(w, h):  # a while loop of TRIPS trips
    return lax.scan(lambda c, _: (jnp.tanh(c @ w), None), h, None, length=TRIPS)[0]


out = sys.argv[1]
grad, scan = jax.jit(jax.grad(loss)), jax.jit(rnn)
rng = np.random.default_rng(0)  # numpy: every program JAX compiles is stored in the profile
a = [rng.standard_normal(s, np.float32) * 0.1 for s in ((64, 128), (128,), (128, 32), (32,), (16, 64), (32, 32))]
p, x, w, h = tuple(map(jnp.asarray, a[:4])), jnp.asarray(a[4]), jnp.asarray(a[5]), jnp.asarray(a[4][:, :32])
jax.block_until_ready((grad(p, x), scan(w, h)))  # compiled and done before the profile starts
jax.profiler.start_trace(out)
for s in range(3):
    with jax.profiler.StepTraceAnnotation("train", step_num=s):
        jax.block_until_ready(grad(p, x))
        jax.block_until_ready(scan(w, h))
jax.profiler.stop_trace()
costs = {}
for f, args in ((grad, (p, x)), (scan, (w, h))):
    c = f.lower(*args).compile()
    ca = c.cost_analysis()
    costs[c.runtime_executable().hlo_modules()[0].name] = {
        k: ca.get(k, 0.0) for k in ("flops", "bytes accessed", "transcendentals")}
print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend(), "cost_analysis": costs,
                  "scan_trips": TRIPS}))
