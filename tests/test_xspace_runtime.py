"""XLA's, PjRt's and TSL's host TraceMe events are runtime calls, not framework ops: the
framework-op table of a JAX profile lists the user's jitted function, as torch's lists
aten ops and not cudaLaunchKernel (formats/xspace/gpu.py ``runtime_calls``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from polyprof import load
from polyprof.analyze.kernel_roofline import kernel_efficiency
from polyprof.analyze.events import event_stats
from polyprof.analyze.ops import op_stats
from polyprof.analyze.table import Table
from polyprof.derive import cache
from polyprof.trace.categories import Kind
from polyprof.trace.core import Trace

DATA = Path(__file__).parent / "data"
#: what a runtime internal's name looks like (none of these is a user's op)
INTERNAL = re.compile(r"PjRt|PJRT|ThreadPool|Threadpool|Await|Execute|Thunk|command_buffer|XLA GPU module|"
                      r"Build buffer|Handle input|ParseArguments|holds|cuLaunchHostFunc|Memory(De)?[Aa]llocation")


def _counts(table: Table) -> dict[tuple[str, str], int]:
    return {(c, n): int(k) for c, n, k in zip(table["category"], table["name"], table["count"])}


def _in_trace(trace: Trace, category: str, name: str) -> int:
    ev = trace.events
    return int(((ev["category"] == trace.string_id(category)) & (ev["name"] == trace.string_id(name))).sum())


def test_h200_train_step_framework_ops_are_the_jitted_function() -> None:
    trace = load(DATA / "h200" / "jax_train_step_h200.xplane.pb")
    ops = op_stats(trace)
    names = list(ops["name"])
    assert names[0] == "PjitFunction(step)"
    assert not [n for n in names if INTERNAL.search(n)], names
    # the jitted function's own numbers: as before (its time, its device time, its
    # launches), and now the framework op of each of its 48 kernels
    assert (int(ops["count"][0]), int(ops["total_ns"][0]), int(ops["self_ns"][0])) == (6, 1815909, 261509)
    assert (int(ops["device_ns"][0]), int(ops["launches"][0])) == (210207, 48)
    assert int(ops["self_device_ns"][0]) == 210207
    # XLA's own TraceMe events that look like launches (cuLaunchHostFunc) are no launch
    # calls without device activity: the 6 cuGraphLaunch calls launch all 48 kernels
    counts = cache.correlation(trace).counts
    assert counts["launch_calls"] == 6 and counts["launch_calls_without_device_activity"] == 0
    assert counts["device_activities_with_framework_op"] == 48
    # the runtime calls stay in the trace, as runtime
    ev = _counts(event_stats(trace))
    for name in ("PjRtCApiLoadedExecutable::Execute", "[0] GpuExecutable::ExecuteThunks", "command_buffer::update",
                 "jit_step:XLA GPU module", "command_buffer_1", "cuLaunchHostFunc", "Build buffer allocations"):
        assert ev[("xla_runtime", name)] == 6, name
    assert ev[("cuda_runtime", "cuGraphLaunch (CudaGraph:2)")] == 6
    rows = np.flatnonzero(trace.events["name"] == trace.string_id("PjRtCApiLoadedExecutable::Execute"))
    assert len(rows) == 6 and (trace.kinds[rows] == Kind.RUNTIME).all()


def test_jax_cpu_framework_ops() -> None:
    trace = load(DATA / "jax_cpu" / "jax_cpu_steps.xplane.pb")
    ops = op_stats(trace)
    assert list(ops["name"]) == ["PjitFunction(step)"]
    ev = _counts(event_stats(trace))
    assert ev[("xla_runtime", "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice")] == 3
    assert _in_trace(trace, "xla_runtime", "ThreadpoolListener::StartRegion") == 4  # instants: in no event_stats
    # the CPU backend's HLO ops stay its device activity, each a row of its module (hlo_module)
    assert ev[("xla_op", "jit_step/ynn_fusion.2")] == 4
    trace = load(DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb")
    assert list(op_stats(trace)["name"]) == ["PjitFunction(loss)", "PjitFunction(rnn)"]


def test_rocm_thunks_and_enqueue_are_runtime_not_lost_launches() -> None:
    """TraceLens's ROCm file: the module's thunks (``cudnn-conv.1``) and PjRt's
    ``EnqueueExecution`` are runtime; the HIP launches are still every launch."""
    trace = load(DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb")
    names = list(op_stats(trace)["name"])
    assert names[0] == "PjitFunction(forward_3d_conv)"
    assert "cudnn-conv.1" not in names and "loop_transpose_fusion" not in names
    assert not [n for n in names if INTERNAL.search(n)], names
    ev = _counts(event_stats(trace))
    assert ev[("xla_runtime", "PjRtStreamExecutorLoadedExecutable::EnqueueExecution")] == 40
    assert ev[("xla_runtime", "cudnn-conv.1")] == 40
    counts = cache.correlation(trace).counts
    assert (counts["launch_calls"], counts["launch_calls_without_device_activity"]) == (232, 0)


def test_kernels_xla_launches_outside_an_op_keep_their_hlo_costs() -> None:
    """TraceLens's legacy ROCm file runs the program on PjRt's worker thread, where no
    framework op is left around the launches: its kernels keep the figures the HLO gives
    them (kernel_efficiency), with no op named."""
    trace = load(DATA / "peers" / "tracelens" / "jax_conv_minimal_legacy.xplane.pb")
    assert cache.correlation(trace).counts["device_activities_with_framework_op"] == 0
    k = kernel_efficiency(trace)
    assert list(k["name"][:1]) == ["jit_forward_3d_conv/input_transpose_fusion"] and len(k) == 5  # (module/kernel)
    assert int(k["device_ns"][0]) == 1950960 and int(k["bytes"][0]) == 5720268800
    assert set(k["op"]) == {""}
    assert round(float(k["flops"][1])) == 154964754709


def test_tensorflow_ops_stay_framework_ops() -> None:
    trace = load(DATA / "peers" / "tensorflow_cpu" / "keras_mlp_cpu.xplane.pb")
    names = set(op_stats(trace)["name"])
    assert {"_MklNativeFusedMatMul", "_MklMatMul", "Mul", "ReadVariableOp", "ExecutorState::Process"} <= names
    assert "ThreadpoolListener::Record" not in names
    assert _in_trace(trace, "xla_runtime", "ThreadpoolListener::Record") == 150


def test_live_jax_cpu_profile(tmp_path: Path) -> None:
    """A profile jax.profiler writes here: the jitted function first, no thread-pool or
    PjRt waits among the framework ops."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        return jnp.tanh(x @ x.T).sum()

    x = jnp.ones((256, 256))
    step(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        for i in range(20):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step(x).block_until_ready()
    (path,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    trace = load(path)
    names = list(op_stats(trace)["name"])
    assert names[0] == "PjitFunction(step)"
    assert not [n for n in names if INTERNAL.search(n)], names
    rt = event_stats(trace)
    assert "xla_runtime" in set(rt["category"])


def test_cupti_overhead_records_are_overhead_not_ops() -> None:
    """XLA's CUPTI tracer writes CUPTI's own overhead records as host TraceMes named by
    their kind (``BUFFER_FLUSH``, ``<UNKNOWN>``: 11 ms each in the H200 transformer):
    the profiler's cost (category ``overhead``, as Kineto's), not the program's ops."""
    trace = load(DATA / "h200" / "jax_transformer_h200.xplane.pb.gz")
    names = set(op_stats(trace)["name"])
    assert names == {"np.asarray(jax.Array)", "PjitFunction(step)"}
    assert _in_trace(trace, "overhead", "BUFFER_FLUSH") == 327 and _in_trace(trace, "overhead", "<UNKNOWN>") == 331
    assert _in_trace(trace, "traceme", "BUFFER_FLUSH") == 0
