"""Bigger GPU traces for issue 35's whole-process benchmarks, on a real NVIDIA GPU.

    python scripts/gpu_bench_traces.py jax OUTDIR 200 gpu      # JAX's own XSpace (jax.profiler)
    python scripts/gpu_bench_traces.py torch OUT.json 15 cuda  # torch.profiler's Kineto JSON
    python scripts/gpu_bench_traces.py jax OUTDIR 2 cpu        # dry runs without a GPU

JAX: a jitted train step of a 6-layer transformer (d 1024, 16 heads, batch 8 x 512
tokens), one ``StepTraceAnnotation`` per step and the loss read back each step. torch:
``nn.TransformerEncoder`` of the same size with AdamW, ``record_shapes``, a schedule of 1
wait, 1 warm-up and STEPS active steps. tests/data/h200/README.md says what they gave.
"""
from __future__ import annotations

import sys
import time


def jax_trace(out: str, steps: int) -> None:
    import jax
    import jax.numpy as jnp

    layers, d, batch, tokens, heads = 6, 1024, 8, 512, 16

    def init(key: jax.Array) -> list[dict[str, jax.Array]]:
        params = []
        for k in jax.random.split(key, layers):
            a, b, c, e = jax.random.split(k, 4)
            params.append({"qkv": jax.random.normal(a, (d, 3 * d)) * 0.02, "o": jax.random.normal(b, (d, d)) * 0.02,
                           "w1": jax.random.normal(c, (d, 4 * d)) * 0.02, "w2": jax.random.normal(e, (4 * d, d)) * 0.02})
        return params

    def norm(x: jax.Array) -> jax.Array:
        m = x.mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)

    def heads_first(t: jax.Array) -> jax.Array:
        return t.reshape(batch, tokens, heads, d // heads).transpose(0, 2, 1, 3)

    def block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        q, k, v = (heads_first(t) for t in jnp.split(norm(x) @ p["qkv"], 3, axis=-1))
        a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / 8.0, axis=-1) @ v
        x = x + a.transpose(0, 2, 1, 3).reshape(batch, tokens, d) @ p["o"]
        return x + jax.nn.gelu(norm(x) @ p["w1"]) @ p["w2"]

    def loss(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
        for p in params:
            x = block(p, x)
        return jnp.mean(x ** 2)

    @jax.jit
    def step(params, x):  # type: ignore[no-untyped-def]
        value, grads = jax.value_and_grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value

    params = init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, tokens, d))
    params, value = step(params, x)  # compiled outside the trace
    jax.block_until_ready(value)
    jax.profiler.start_trace(out)
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, value = step(params, x)
            float(value)
    jax.profiler.stop_trace()


def torch_trace(out: str, steps: int, device: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 6).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 512, 1024, device=device) if device == "cuda" else torch.randn(1, 16, 1024)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts, record_shapes=True, schedule=schedule(wait=1, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for _ in range(steps + 2):
            with torch.profiler.record_function("train_step"):
                opt.zero_grad(set_to_none=True)
                model(x).pow(2).mean().backward()
                opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            prof.step()


def main() -> int:
    mode, out, steps, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    t0 = time.time()
    if mode == "jax":
        jax_trace(out, steps)
    else:
        torch_trace(out, steps, device)
    print(mode, "recorded in", round(time.time() - t0, 1), "s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
