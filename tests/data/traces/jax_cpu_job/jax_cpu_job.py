"""Two JAX processes on the CPU (gloo collectives), each recording its own XSpace.

    python jax_cpu_job.py RANK 2 OUTDIR      (one per rank, same port; see README.md)

Each process holds one CPU device; the 2-device mesh shards the batch, so every step's
gradient is an XLA ``all-reduce`` between the processes. Rank 1 sleeps 100 ms at the
start of step 3 (before its all-reduce), so rank 0 waits for it there.
"""
import json
import os
import sys
import time

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
rank, world, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize("127.0.0.1:29657", num_processes=world, process_id=rank)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

mesh = Mesh(np.array(jax.devices()), ("d",))


@jax.jit
def step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.001 * g, loss


w = jax.device_put(jnp.ones((128, 128)) * 0.01, NamedSharding(mesh, P()))
xs = jax.make_array_from_callback((256, 128), NamedSharding(mesh, P("d")),
                                  lambda idx: np.ones((256, 128), np.float32)[idx])
w, loss = step(w, xs)  # compile outside the profile
loss.block_until_ready()
times = []
jax.profiler.start_trace(os.path.join(out, f"rank{rank}"))
for i in range(6):
    t0 = time.perf_counter()
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        if rank == 1 and i == 3:
            time.sleep(0.1)
        w, loss = step(w, xs)
        loss.block_until_ready()
    times.append(round((time.perf_counter() - t0) * 1e3, 2))
jax.profiler.stop_trace()
print(json.dumps({"rank": rank, "step_ms": times, "loss": float(loss)}), flush=True)
jax.distributed.shutdown()
