"""A JAX loop on 4 CPU devices (JAX 0.10.2): a ``load`` section sleeping 8 ms, then a
``compute`` section calling a jitted function on a batch sharded over the devices and
blocking until it is ready; 8 steps (``polyprof.step``), after one compiling call.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \
        polyprof run --plugins jax -o d.polyprof jax_cpu_devices.py      (see README.md)
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import polyprof

mesh = Mesh(np.array(jax.devices()), ("d",))


@jax.jit
def step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return x


w = jax.device_put(jnp.ones((256, 256)) * 0.01, NamedSharding(mesh, P()))
x = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("d")))
step(w, x).block_until_ready()
for _ in range(8):
    with polyprof.section("load"):
        time.sleep(0.008)
    with polyprof.section("compute"):
        step(w, x).block_until_ready()
    polyprof.step()
