"""One JAX process, 4 CPU devices, a shard_map whose psum is an XLA all-reduce per device.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python four_devices.py OUTDIR
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
mesh = Mesh(np.array(jax.devices()).reshape(4), ("d",))


@jax.jit
def step(w, x):
    def loss(w):
        def local(w, x):
            return jax.lax.psum(jnp.sum(jnp.tanh(x @ w) ** 2), "d")
        return shard_map(local, mesh=mesh, in_specs=(P(), P("d")), out_specs=P())(w, x)
    value, g = jax.value_and_grad(loss)(w)
    return w - 0.01 * g, value


w = jax.device_put(jnp.ones((128, 128)) * 0.01, NamedSharding(mesh, P()))
x = jax.device_put(jnp.ones((256, 128)), NamedSharding(mesh, P("d")))
w, value = step(w, x)  # compile outside the profile
value.block_until_ready()
jax.profiler.start_trace(sys.argv[1])
for i in range(5):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w, value = step(w, x)
        value.block_until_ready()
jax.profiler.stop_trace()
