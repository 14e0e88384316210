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


def pipeline_trace(steps: int = 5, step_us: int = 10_000, kernels: int = 20, kernel_us: int = 490,
                   lead_us: int = 200, copy_us: int = 0, host_gap_us: int = 0, sync_us: int = 0,
                   loader_us: int = 0, end_sync_us: int = 0, sync_threads: int = 1, stall_us: int = 0,
                   loader_name: str = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
    """A training loop in the shape torch.profiler records it, healthy by default.

    Per step k (host ``ProfilerStep#k`` of ``step_us`` µs, plus ``host_gap_us`` of host
    work between steps): an optional ``enumerate(DataLoader)...`` annotation (or
    ``loader_name``) of ``loader_us`` first; then ``kernels`` launches (``cudaLaunchKernel``, 10 µs) spread
    over the step, each running ``kernel_us`` µs on stream 7 back to back, starting
    ``lead_us`` after the step began; an optional HtoD copy of ``copy_us`` before the
    kernels; an optional ``cudaStreamSynchronize`` of ``sync_us`` at the end of the step
    on each of ``sync_threads`` threads. ``end_sync_us`` adds the ``cudaDeviceSynchronize``
    the profiler makes after the last step (outside every step). ``stall_us``: halfway
    through the kernels the host makes the stream wait for an event
    (``cudaStreamWaitEvent``) that another stream records ``stall_us`` later, outside the
    trace: the kernels launched after it wait that long to start, the device idle.
    """
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100)
    th = b.track(host, "main", "thread", tid=1)
    others = [b.track(host, f"worker {i}", "thread", tid=2 + i) for i in range(sync_threads - 1)]
    gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
    s7 = b.track(gpu, "stream 7", "stream", tid=7)
    corr = 1
    period = step_us + host_gap_us
    for k in range(steps):
        o = k * period * US
        b.event(th, f"ProfilerStep#{k}", o, step_us * US, "user_annotation")
        t = o
        if loader_us:
            b.event(th, loader_name, t, loader_us * US, "user_annotation")
            t += loader_us * US
        d = t + lead_us * US
        if copy_us:
            b.event(th, "cudaMemcpyAsync", t, 10 * US, "cuda_runtime", correlation_id=corr)
            b.event(s7, "Memcpy HtoD (Pageable -> Device)", d, copy_us * US, "gpu_memcpy", correlation_id=corr,
                    stream=7)
            corr += 1
            d += copy_us * US
        work_us = step_us - (t - o) // US - sync_us - 20
        every = max(work_us // max(kernels, 1), 11)
        for i in range(kernels):
            ls = t + i * every * US
            if stall_us and i == kernels // 2:
                b.event(th, "cudaStreamWaitEvent", ls - 4 * US, 3 * US, "cuda_runtime", correlation_id=corr)
                corr += 1
                d += stall_us * US
            b.event(th, "aten::mul", ls, 12 * US, "cpu_op")
            b.event(th, "cudaLaunchKernel", ls + US, 10 * US, "cuda_runtime", correlation_id=corr)
            d = max(d, ls + 12 * US)
            b.event(s7, "elementwise_kernel", d, kernel_us * US, "kernel", correlation_id=corr, stream=7)
            d += kernel_us * US + 2 * US
            corr += 1
        if sync_us:
            for tr in (th, *others):
                b.event(tr, "cudaStreamSynchronize", o + (step_us - sync_us - 5) * US, sync_us * US, "cuda_runtime",
                        correlation_id=corr)
                corr += 1
    if end_sync_us:
        b.event(th, "cudaDeviceSynchronize", steps * period * US, end_sync_us * US, "cuda_runtime",
                correlation_id=corr)
    return b.build()
