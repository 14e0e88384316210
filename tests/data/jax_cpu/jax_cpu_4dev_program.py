"""The program that made jax_cpu_4dev.xplane.pb and jax_cpu_4dev.trace.json.gz (README.md)."""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402 - after XLA_FLAGS
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

mesh = Mesh(jax.devices(), ("d",))
x = jax.device_put(jnp.ones((4096, 512)), NamedSharding(mesh, PartitionSpec("d")))
w = jnp.ones((512, 512))


@jax.jit
def f(x, w):
    with jax.named_scope("layer"):
        y = jnp.tanh(x @ w)
    return y.sum()


f(x, w).block_until_ready()
with jax.profiler.trace("prof", create_perfetto_trace=True):
    for i in range(5):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            f(x, w).block_until_ready()
