"""An audit's JAX CPU program (JAX 0.10.2), reformatted: the gradient of a matmul, a tanh,
a 2-D convolution and a matmul, jitted; 3 steps (``polyprof.step``).

    polyprof run --plugins jax -o j.polyprof jax_cpu_block.py pp      (see README.md)

``python jax_cpu_block.py ca`` prints XLA's cost analysis of the program instead.
"""
import sys

import jax
import jax.numpy as jnp

import polyprof


def f(x, w1, w2, k):
    h = jnp.tanh(x @ w1)
    y = jax.lax.conv_general_dilated(h.reshape(8, 1, 32, 32), k, (2, 2), "SAME")
    return (y.reshape(8, -1) @ w2).sum()


g = jax.jit(jax.grad(f, argnums=(1, 2)))
ks = jax.random.split(jax.random.PRNGKey(0), 4)
x = jax.random.normal(ks[0], (8, 256))
w1 = jax.random.normal(ks[1], (256, 1024))
k = jax.random.normal(ks[2], (4, 1, 3, 3))
w2 = jax.random.normal(ks[3], (4 * 16 * 16, 64))
args = (x, w1, w2, k)
if sys.argv[1] == "ca":
    ca = g.lower(*args).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    print({kk: v for kk, v in ca.items() if kk in ("flops", "bytes accessed", "transcendentals")})
else:
    jax.block_until_ready(g(*args))
    for _ in range(3):
        jax.block_until_ready(g(*args))
        polyprof.step()
