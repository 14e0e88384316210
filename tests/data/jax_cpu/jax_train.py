"""A small jitted training loop on JAX's CPU backend (an MLP, SGD): 4 steps recorded.

    python jax_train.py OUTDIR      (JAX writes OUTDIR/plugins/profile/*/HOST.xplane.pb)
"""
import sys

import jax
import jax.numpy as jnp


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    h = jnp.tanh(h @ params["w2"])
    return jnp.mean((h @ params["w3"] - y) ** 2)


@jax.jit
def step(params, x, y):
    loss, g = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g), loss


k = jax.random.split(jax.random.PRNGKey(0), 5)
params = {"w1": jax.random.normal(k[0], (512, 1024)) * 0.02, "b1": jnp.zeros(1024),
          "w2": jax.random.normal(k[1], (1024, 1024)) * 0.02, "w3": jax.random.normal(k[2], (1024, 16)) * 0.02}
x = jax.random.normal(k[3], (512, 512))
y = jax.random.normal(k[4], (512, 16))
params, loss = step(params, x, y)
loss.block_until_ready()
jax.profiler.start_trace(sys.argv[1])
for i in range(4):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        params, loss = step(params, x, y)
        loss.block_until_ready()
jax.profiler.stop_trace()
print(float(loss))
