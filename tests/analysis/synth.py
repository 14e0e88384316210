"""Small synthetic traces, built with TraceBuilder, whose answers are worked out by hand."""

from __future__ import annotations

from polyprof.trace import TraceBuilder

US = 1000


def gpu_trace(steps: int = 2, with_ids: bool = True):
    """Two ProfilerSteps of 1000 µs on a host thread; a GPU with one stream.

    Per step (offset o = k*1000 µs):
      host: ProfilerStep#k [o, o+1000); section "forward" [o+10, o+400) holding
      aten::linear [o+20, o+100) -> cudaLaunchKernel [o+30, o+40) -> gemm [o+50, o+150)
      aten::relu [o+120, o+200) -> cudaLaunchKernel [o+130, o+140) -> relu [o+160, o+170)
      section "optimizer" [o+500, o+900) -> cudaMemcpyAsync [o+510, o+520) -> memcpy [o+600, o+650)
      cudaDeviceSynchronize [o+700, o+800) (no device activity)
    """
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100)
    th = b.track(host, "main", "thread", tid=1)
    gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
    s7 = b.track(gpu, "stream 7", "stream", tid=7)
    corr = 1000
    ext = 1
    for k in range(steps):
        o = k * 1000 * US
        b.event(th, f"ProfilerStep#{k + 1}", o, 1000 * US, "user_annotation")
        b.event(th, "forward", o + 10 * US, 390 * US, "user_annotation")
        for (name, t0, t1, kname, k0, k1) in (("aten::linear", 20, 100, "gemm", 50, 150),
                                              ("aten::relu", 120, 200, "relu", 160, 170)):
            b.event(th, name, o + t0 * US, (t1 - t0) * US, "cpu_op", external_id=ext)
            launch = b.event(th, "cudaLaunchKernel", o + (t0 + 10) * US, 10 * US, "cuda_runtime",
                             external_id=ext, correlation_id=corr if with_ids else None)
            kern = b.event(s7, kname, o + k0 * US, (k1 - k0) * US, "kernel", stream=7, device=0,
                           correlation_id=corr if with_ids else None, external_id=ext)
            if not with_ids:
                b.flow(launch, kern, corr, "ac2g")
            corr += 1
            ext += 1
        b.event(th, "optimizer", o + 500 * US, 400 * US, "user_annotation")
        b.event(th, "cudaMemcpyAsync", o + 510 * US, 10 * US, "cuda_runtime", correlation_id=corr)
        b.event(s7, "Memcpy HtoD", o + 600 * US, 50 * US, "gpu_memcpy", correlation_id=corr, stream=7)
        corr += 1
        b.event(th, "cudaDeviceSynchronize", o + 700 * US, 100 * US, "cuda_runtime", correlation_id=corr)
        corr += 1
    return b.build()
