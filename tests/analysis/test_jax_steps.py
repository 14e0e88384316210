"""Steps from a real JAX CPU profile (StepTraceAnnotation with step_num), read from XSpace."""

from __future__ import annotations

import pytest


def test_jax_step_annotations_become_steps(tmp_path):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    pytest.importorskip("polyprof.formats.xspace")
    import polyprof
    import polyprof.analyze as A
    from polyprof.derive import find_steps

    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    x = jnp.ones((128, 128))
    f(x).block_until_ready()
    jax.profiler.start_trace(str(tmp_path))
    try:
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=10 + i):
                f(x).block_until_ready()
    finally:
        jax.profiler.stop_trace()
    path = next(tmp_path.rglob("*.xplane.pb"))
    t = polyprof.load(path)
    steps = find_steps(t)
    assert steps.number.tolist() == [10, 11, 12]
    assert (steps.end > steps.start).all() and (steps.start[1:] >= steps.end[:-1]).all()
    ss = A.step_stats(t)
    assert ss["step"].tolist() == [10, 11, 12]
    assert (ss["host_ns"] == steps.end - steps.start).all()
