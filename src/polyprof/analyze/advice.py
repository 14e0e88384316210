"""What to try, in the language of the program in the trace.

A finding's suggestion names the tools of the framework and device that produced the
trace: PyTorch advice (DataLoader, torch.compile, CUDA graphs) for a torch trace, JAX /
XLA advice for an XLA trace, OpenCL advice for an OpenCL program, and plain advice
otherwise. The framework is read from the trace itself (:func:`framework`).
"""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .common import on_device

#: rule -> framework -> suggestion ("generic" is the fallback)
ADVICE: dict[str, dict[str, str]] = {
    "host_bound": {
        "torch": "The device finishes work before the host issues more. Cut host time per step: move data "
                 "loading/augmentation to DataLoader workers (num_workers, pin_memory, prefetch), reduce "
                 "Python overhead (torch.compile{graphs}), or give the device more work per launch (larger batch).",
        "jax": "The device finishes work before the host issues more. Keep the whole step in one jax.jit, "
               "avoid Python work and host round trips between steps, prefetch the next batch to the device, "
               "or give each step more work (larger batch).",
        "opencl": "The device finishes work before the host enqueues more. Enqueue several commands before "
                  "waiting (clFlush, not clFinish, between them), keep buffers on the device, build programs "
                  "once outside the loop, and give each NDRange more work.",
        "generic": "The device finishes work before the host issues more. Cut host time between launches, "
                   "queue work ahead instead of waiting, or give the device more work per launch.",
    },
    "input_bound": {
        "torch": "Load and preprocess the next batch while the current one runs: DataLoader with num_workers "
                 "> 0 (more of them where it has some: the workers do not keep up), persistent_workers, "
                 "pin_memory and prefetch_factor; cache decoded data.",
        "jax": "Load the next batch while the current one runs: a prefetching input pipeline (tf.data or "
               "grain with prefetch), device_put ahead of use; cache decoded data.",
        "generic": "Load and preprocess the next input while the current one is processed (a background "
                   "thread or process with a bounded queue); cache decoded data.",
    },
    "launch_bound": {
        "torch": "Launch overhead rivals the work itself. Fuse small ops (torch.compile, fused optimizers such "
                 "as foreach/fused Adam){graphs_tail}, or batch more work per kernel.",
        "jax": "Launch overhead rivals the work itself. Put more of the step under one jax.jit (fewer, "
               "larger XLA programs), avoid op-by-op execution, or batch more work per op.",
        "opencl": "Launch overhead rivals the work itself. Fuse small kernels into one, use larger NDRanges, "
                  "and enqueue without waiting between them.",
        "generic": "Launch overhead rivals the work itself. Fuse small kernels or batch more work per launch.",
    },
    "launch_bound_in_graphs": {  # most kernels launched by CUDA/HIP graph replays: no capture to suggest
        "torch": "The kernels already run from graph replays, which share one launch call's cost among them; "
                 "each short kernel still leaves the device a gap of a few µs. Fuse small ops (torch.compile, "
                 "fused kernels) or batch more work per kernel.",
        "jax": "The kernels already run from graph replays (XLA command buffers), which share one launch call's "
               "cost among them; each short kernel still leaves the device a gap of a few µs. Let XLA fuse "
               "more (fewer, larger ops per jit) or batch more work per op.",
        "generic": "The kernels already run from graph replays, which share one launch call's cost among them; "
                   "each short kernel still leaves the device a gap of a few µs. Fuse small kernels or batch "
                   "more work per kernel.",
    },
    "copy_bound": {
        "torch": "Move less data between host and device: keep tensors on the device, batch small transfers, "
                 "and overlap copies with compute (pinned host memory and non_blocking copies, no per-step "
                 ".cpu()/.item()).",
        "jax": "Move less data between host and device: device_put the next batch ahead of use, donate "
               "buffers, keep results on the device (no per-step np.asarray / .block_until_ready()).",
        "opencl": "Move less data between host and device: keep buffers on the device across kernels, "
                  "batch small transfers, use non-blocking clEnqueueRead/WriteBuffer with events, or map "
                  "buffers (CL_MEM_ALLOC_HOST_PTR) instead of copying.",
        "generic": "Move less data between host and device: keep data on the device, batch small transfers "
                   "and overlap them with compute.",
    },
    "unsynchronised_clock": {
        "opencl": "Record with the OpenCL plugin's clock sampling on (its default): options sync_markers "
                  "(marker commands at stop), clock_interval_s (periodic samples) and event_samples (each "
                  "enqueue) give the fit its samples; one of them is enough.",
        "generic": "Record with the device plugin's clock synchronisation on, so its times can be put on the "
                   "host's clock; until then compare this device only with itself.",
    },
    "sync_stalls": {
        "torch": "Each sync stops the host from queueing work ahead. Remove per-step .item(), .cpu(), "
                 "print(tensor) and explicit synchronize() from the loop; log every N steps; use "
                 "non_blocking copies and events instead of device-wide syncs.",
        "jax": "Each sync stops the host from queueing work ahead. Remove per-step block_until_ready(), "
               "float(x) / np.asarray(x) and printing of device arrays from the loop; log every N steps.",
        "opencl": "Each wait stops the host from queueing work ahead. Replace clFinish and blocking reads "
                  "inside the loop with event wait lists between commands; wait once per frame or batch.",
        "generic": "Each sync stops the host from queueing work ahead. Wait less often: once per batch "
                   "rather than per operation.",
    },
    "queued_stall": {
        "torch": "The host had launched the work; the device's queue held it back. Most often its stream waits on "
                 "an event that another stream, device, thread or process records (stream.wait_stream, "
                 "event.wait, cudaStreamWaitEvent; a serving engine's overlap or scheduler thread): profile "
                 "that one too, as the trace does not show what it waited for. Else work ahead of it in the "
                 "stream (a copy, a host callback). Record the event as soon as its work is queued, and queue "
                 "independent work on another stream so the device has something to run meanwhile.",
        "jax": "The host had launched the work; the device's queue held it back, waiting on another stream or "
               "device (an async collective, a transfer, a host callback such as jax.debug.print or "
               "io_callback). Profile every process of the job, and keep host callbacks out of the step.",
        "opencl": "The commands were enqueued but did not start: an in-order queue runs nothing until the commands "
                  "before it finish, a command waits for the events of its wait list (a user event not yet "
                  "set, another queue's command), and enqueued commands may not reach the device until "
                  "clFlush. Flush after enqueuing, set user events as soon as possible, and put independent "
                  "work on another queue.",
        "generic": "The host had launched the work; the device's queue held it back, waiting on an event that "
                   "another stream, device, thread or process records, or behind a copy or callback in the same "
                   "stream. Profile what records that event, and queue independent work meanwhile.",
    },
    "low_mfu": {  # (the finding leads with "The ops listed lose ..." where it lists some)
        "torch": "For compute-bound ops use a precision the tensor units run fast (bf16/fp16 autocast, TF32 for "
                 "fp32 matmuls), shapes that are multiples of 8/16, larger batches; fuse memory-bound ones with "
                 "their neighbours (torch.compile) so their data stays on chip.",
        "jax": "For compute-bound ops use bf16 (jax.numpy dtypes, precision=), shapes that are multiples of 8/128, "
               "larger batches; keep memory-bound ones inside one jax.jit so XLA fuses them.",
        "generic": "For compute-bound ops use a precision the device's matrix units run fast, shapes that are "
                   "multiples of 8/16, larger batches; fuse memory-bound ones with their neighbours.",
    },
    "fusable_chain": {
        "torch": "Each op of the chain reads and writes memory below the device's ridge point; fused into one "
                 "kernel (torch.compile, or a fused op such as F.scaled_dot_product_attention or a fused "
                 "optimizer) the intermediates stay on chip.",
        "jax": "Each op of the chain reads and writes memory below the device's ridge point; inside one jax.jit "
               "XLA fuses such chains, so the intermediates stay on chip.",
        "generic": "Each op of the chain reads and writes memory below the device's ridge point; fused into one "
                   "kernel the intermediates stay on chip.",
    },
    "memory_peak_held_by_one": {  # (the finding leads with the holder: "Lowering the peak starts with ...: ")
        "torch": "free or reuse its tensors sooner (del, in-place ops), keep fewer of them alive at once "
                 "(smaller batch or chunks, activation checkpointing: torch.utils.checkpoint), or store them "
                 "in a smaller dtype.",
        "jax": "keep fewer of its buffers alive at once (smaller batch or chunks, rematerialisation: "
               "jax.checkpoint), let XLA reuse the step's inputs (donate_argnums), or store them in a "
               "smaller dtype.",
        "generic": "free or reuse its buffers sooner, keep fewer of them alive at once (smaller batch or "
                   "chunks, recompute instead of keeping), or store them in a smaller dtype.",
    },
    "memory_growth": {
        "torch": "Something keeps memory from every step: a list that collects tensors (losses kept with their "
                 "graph: use loss.item() or .detach()), a cache that never evicts, or state appended each "
                 "step. The memory table lists what is live at the peak.",
        "jax": "Something keeps memory from every step: a Python list that collects device arrays (bring "
               "metrics to the host with jax.device_get and drop the references), a cache that never "
               "evicts, or state appended each step. The memory table lists what is live at the peak.",
        "generic": "Something keeps memory from every step: a list that collects buffers, a cache that never "
                   "evicts, or state appended each step. The memory table lists what is live at the peak.",
    },
    "pageable_copies": {
        "torch": "A copy from or to pageable memory is staged through a driver buffer: it runs below the link's "
                 "bandwidth and holds up the host, so it cannot overlap compute. Pin the host buffers "
                 "(DataLoader(pin_memory=True), tensor.pin_memory(), torch.empty(..., pin_memory=True) for a "
                 "reused buffer) and copy with .to(device, non_blocking=True).",
        "jax": "A copy from or to pageable memory is staged through a driver buffer: it runs below the link's "
               "bandwidth and cannot overlap compute. device_put the next batch ahead of use (prefetch to the "
               "device), keep results on the device, and bring back only what the host needs.",
        "generic": "A copy from or to pageable memory is staged through a driver buffer: it runs below the link's "
                   "bandwidth and holds up the host, so it cannot overlap compute. Allocate the host buffers "
                   "page-locked (cudaMallocHost / cudaHostAlloc, hipHostMalloc, or cudaHostRegister an existing "
                   "one) and copy asynchronously on a stream of its own.",
    },
    "small_copies": {
        "torch": "Each copy pays a fixed cost of microseconds (and a host call) whatever its size. Batch the small "
                 "tensors into one (torch.cat or one flat buffer, then a single .to(device)), keep the data on "
                 "the device across steps, and avoid per-element host reads (.item(), .tolist(), printing "
                 "device tensors).",
        "jax": "Each copy pays a fixed cost of microseconds whatever its size. Move one batch as one pytree "
               "(a single device_put), keep state on the device inside the jitted step, and avoid per-step "
               "float(x) / np.asarray(x) of small device arrays.",
        "opencl": "Each copy pays a fixed cost of microseconds whatever its size. Pack small buffers into one "
                  "and write it with one clEnqueueWriteBuffer, keep buffers on the device across kernels, and "
                  "read back only what the host needs.",
        "generic": "Each copy pays a fixed cost of microseconds whatever its size. Batch the small transfers "
                   "into one buffer and one copy, keep the data on the device between kernels, and read back "
                   "only what the host needs.",
    },
    "out_of_memory": {
        "torch": "The allocations listed were live when it ran out: cut them first. Lower the peak with a "
                 "smaller batch (gradient accumulation keeps the effective one), activation checkpointing "
                 "(torch.utils.checkpoint), bf16/fp16 autocast, and dropping references to tensors sooner (del; "
                 "no tensors kept across steps).",
        "generic": "The allocations listed were live when it ran out: cut them first. Lower the peak with a "
                   "smaller batch or chunks, recomputation instead of keeping intermediates, a smaller dtype, and "
                   "freeing buffers sooner.",
    },
    "memory_cached": {
        "torch": "PyTorch's caching allocator keeps freed blocks reserved for reuse; blocks split by allocations "
                 "of other sizes cannot serve a larger one (fragmentation). PYTORCH_CUDA_ALLOC_CONF="
                 "expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm) lets segments grow instead of adding "
                 "new ones; "
                 "torch.cuda.empty_cache() returns the unused cache (for other processes, at the cost of "
                 "allocating again); allocating the largest, long-lived tensors first also helps.",
        "generic": "The allocator keeps freed memory reserved for reuse; blocks split by allocations of other "
                   "sizes cannot serve a larger one (fragmentation). Allocate long-lived, large buffers first, "
                   "reuse buffers of one size, or let the allocator return its unused cache.",
    },
    "recompiles": {
        "torch": "A compilation after the warm-up is paid again: new input shapes (a last batch of another size, "
                 "variable sequence lengths: pad to a few fixed sizes, torch._dynamo.mark_dynamic or "
                 "dynamic=True), a guard that failed, or a graph break reached for the first time. "
                 "TORCH_LOGS=recompiles,graph_breaks says which; torch._dynamo.config.cache_size_limit caps them.",
        "generic": "A compilation after the warm-up is paid again: keep the compiled program's input shapes and "
                   "types fixed, or mark the dimensions that vary as dynamic.",
    },
    "low_occupancy": {
        "generic": "Registers or shared memory per block cap how many blocks an SM holds. Cap registers "
                   "(__launch_bounds__, maxrregcount, Triton num_warps/num_stages), use less shared memory per "
                   "block (smaller tiles, fewer pipeline stages), or check that the low occupancy is the "
                   "kernel's design (large GEMM tiles often are).",
    },
}


#: ``rule@variant`` -> framework -> suggestion, chosen before the rule's own (``suggestion``):
#: ``@compiled`` for a torch.compile program (no advice to compile what is), ``@cpu`` for a
#: CPU run (no tensor cores, no device memory: threads, oneDNN, bf16 only with AMX or
#: AVX512-BF16), ``@compiled@cpu`` for a torch.compile program on a CPU (taken first; a rule
#: with a ``@compiled`` and a ``@cpu`` text for a framework has one)
VARIANTS: dict[str, dict[str, str]] = {
    "host_bound@compiled": {
        "torch": "The device finishes work before the host issues more. The program is compiled already "
                 "(torch.compile): where the host time is its compilation (Dynamo and Inductor in the steps: "
                 "profile after the first calls), that is not the steady state; else cut the host work between "
                 "the compiled regions (graph breaks split them: TORCH_LOGS=graph_breaks){reduce_overhead}, "
                 "or give the device more work per launch (larger batch).",
    },
    "launch_bound@compiled": {
        "torch": "Launch overhead rivals the work itself. The program is compiled already (torch.compile): "
                 "graph breaks split it into more, smaller launches (TORCH_LOGS=graph_breaks){reduce_overhead}; "
                 "ops outside the compiled regions run one kernel each; or batch more work per kernel.",
    },
    "low_mfu@compiled": {
        "torch": "For compute-bound ops use a precision the tensor cores run fast (bf16/fp16 autocast, TF32 for "
                 "fp32 matmuls: torch.set_float32_matmul_precision('high')), shapes that are multiples of 8/16, "
                 "larger batches; memory-bound ones outside the compiled regions (run eagerly, or past a graph "
                 "break: TORCH_LOGS=graph_breaks) are what compiling them too would fuse.",
    },
    "low_mfu@cpu": {
        "torch": "On a CPU the matmuls run in oneDNN/MKL on the cores: give them as many threads as physical cores "
                 "(torch.set_num_threads, OMP_NUM_THREADS; fewer where DataLoader workers share the cores), larger "
                 "batches so each GEMM is big enough to use them, bf16 (torch.autocast('cpu', "
                 "dtype=torch.bfloat16)) only where the CPU runs it natively (AMX or AVX512-BF16: amx_bf16 or "
                 "avx512_bf16 among lscpu's flags; elsewhere it is slower than fp32); compile the model "
                 "(torch.compile) so that Inductor fuses the memory-bound ops into vectorised loops.",
        "jax": "On a CPU: larger batches so each dot is big enough for the cores, every core free for XLA's "
               "thread pool (no other busy processes, no taskset or container limit below the cores), the whole "
               "step in one jax.jit so XLA fuses memory-bound ops; bf16 gains little where XLA's CPU backend runs "
               "a bf16 dot in fp32 after converts (its HLO shows them).",
        "generic": "On a CPU: as many threads as physical cores, larger batches, a precision its vector or matrix "
                   "units run natively (bf16 only with AMX or AVX512-BF16); fuse memory-bound ops.",
    },
    "low_mfu@compiled@cpu": {
        "torch": "The program is compiled already (torch.compile): on a CPU Inductor runs the matmuls as oneDNN/MKL "
                 "calls (the aten::mm / aten::addmm in the trace) and fuses the rest into C++ loops the trace "
                 "does not show. Give them as many threads as physical cores (torch.set_num_threads, "
                 "OMP_NUM_THREADS), larger batches so each GEMM is big enough to use them, bf16 autocast only "
                 "where the CPU runs it natively (AMX or AVX512-BF16: amx_bf16 or avx512_bf16 among lscpu's "
                 "flags); for inference, torch._inductor.config.freezing = True folds the weights in and "
                 "prepacks them for oneDNN; ops outside the compiled regions (past a graph break: "
                 "TORCH_LOGS=graph_breaks) run eagerly.",
    },
    "fusable_chain@compiled": {
        "torch": "Each op of the chain reads and writes memory below the device's ridge point. They ran outside "
                 "the compiled regions (eagerly, or past a graph break: TORCH_LOGS=graph_breaks): compiled too, "
                 "or replaced by a fused op (F.scaled_dot_product_attention, a fused optimizer), the "
                 "intermediates stay on chip.",
    },
    "fusable_chain@cpu": {
        "torch": "Each op of the chain reads and writes memory below the CPU's ridge point; fused into one loop "
                 "(torch.compile: Inductor's vectorised C++ kernels, or a fused op such as "
                 "F.scaled_dot_product_attention) the intermediates stay in cache.",
        "jax": "Each op of the chain reads and writes memory below the CPU's ridge point; inside one jax.jit XLA "
               "fuses such chains, so the intermediates stay in cache.",
        "generic": "Each op of the chain reads and writes memory below the CPU's ridge point; fused into one loop "
                   "the intermediates stay in cache.",
    },
    "fusable_chain@compiled@cpu": {
        "torch": "Each op of the chain reads and writes memory below the CPU's ridge point. They ran outside the "
                 "compiled regions (eagerly, or past a graph break: TORCH_LOGS=graph_breaks): compiled too, or "
                 "replaced by a fused op (F.scaled_dot_product_attention, a fused optimizer), the intermediates "
                 "stay in cache.",
    },
    "input_bound@cpu": {
        "torch": "Load and preprocess the next batch while the current one runs: DataLoader with num_workers > 0 "
                 "(more of them where it has some: the workers do not keep up), persistent_workers and "
                 "prefetch_factor; on a CPU the workers share the cores with the model's threads, so leave them "
                 "some (torch.set_num_threads); cache decoded data.",
    },
}


def framework(trace: Trace) -> str:
    """"torch", "jax", "opencl" or "generic": who made the device work in ``trace``."""
    return cache.memo(trace, "framework", _framework)


def _framework(trace: Trace) -> str:
    if mkeys.TORCH_MEMORY_SNAPSHOT in trace.metadata:  # torch's caching allocator wrote it
        return "torch"
    planes = [p.name.lower() for p in trace.planes]
    if any("opencl" in p for p in planes) or "opencl_api" in trace.strings:
        return "opencl"
    loaded = trace.stats.loaded()  # no decode of deferred Kineto args
    if any(k in loaded for k in (keys.HLO_OP, keys.HLO_MODULE, "hlo_category")) or "xla_op" in trace.strings:
        return "jax"
    if cache.steps(trace).source == "ProfilerStep" or any(s.startswith("aten::") for s in trace.strings):
        return "torch"
    return "generic"


def _has_cuda(trace: Trace) -> bool:
    """Whether CUDA ran in ``trace`` (its runtime's calls, or an NVIDIA device): looked up
    once per trace (a scan of its strings), not once per finding."""
    return cache.memo(trace, "has_cuda", lambda t: "cuda_runtime" in t.strings or any(
        p.kind == "device" and "nvidia" in (p.vendor or "").lower() for p in t.planes))


#: how the names torch.compile's regions leave in a torch.profiler trace begin (vLLM's
#: compiled graphs leave only ``## Call CompiledFxGraph ...``)
COMPILED_MARKS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup", "CompiledFunction", "## Call CompiledFxGraph")


def compiled(trace: Trace) -> bool:
    """Whether the program ran torch.compile's compiled regions (its names in the trace;
    looked for once per trace)."""
    return cache.memo(trace, "compiled", lambda t: any(s.startswith(COMPILED_MARKS) for s in t.strings))


def suggestion(trace: Trace, rule: str) -> str:
    """The suggestion of ``rule`` for the framework (and device) of ``trace``: its
    ``@compiled@cpu`` text for a torch.compile program on a CPU, its ``@compiled`` text for
    a torch.compile program (no advice to compile what is), its ``@cpu`` text for a CPU run
    (no device activity), where the rule has them, in that order."""
    fw = framework(trace)
    comp, cpu = fw == "torch" and compiled(trace), not on_device(trace)
    variants = ([f"{rule}@compiled@cpu"] if comp and cpu else []) + ([f"{rule}@compiled"] if comp else []) + \
        ([f"{rule}@cpu"] if cpu else [])
    text = next((t for t in (VARIANTS.get(v, {}).get(fw, VARIANTS.get(v, {}).get("generic")) for v in variants)
                 if t), None)
    if text is None:
        texts = ADVICE[rule]
        text = texts.get(fw, texts["generic"])
    cuda = _has_cuda(trace)
    return text.format(graphs=", CUDA graphs" if cuda else "",
                       graphs_tail=", capture the step in a CUDA graph" if cuda else "",
                       reduce_overhead=", mode=\"reduce-overhead\" to replay them as CUDA graphs" if cuda else "")


def mentions(text: str) -> np.ndarray:
    """Framework-specific words found in ``text`` (for tests and reviews)."""
    words = ("DataLoader", "torch.compile", "CUDA graph", "jax.jit", "clFinish", "non_blocking")
    return np.array([w for w in words if w in text], object)
