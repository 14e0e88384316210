"""``import polyprof`` and the Kineto reader stay light: no pyarrow or pandas until used.

pyarrow alone adds ~30 MB RSS and ~0.1 s at import; the crash journal used to import
it at module level, so every ``import polyprof`` (and every trace load) paid for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def child(code: str, timeout: int = 300, **env_extra: str) -> str:
    """Run ``python -c code`` on this tree's src (a fresh interpreter: what it imports is
    what a user's process would); its stdout, after checking it succeeded."""
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_import_polyprof_and_kineto_reader_without_pyarrow_or_pandas():
    code = ("import sys, polyprof, polyprof.formats.kineto, polyprof.collect.journal as j; "
            "print(sorted(m for m in ('pyarrow', 'pandas') if m in sys.modules))")
    out = child(code, timeout=120)
    assert out.strip() == "[]"


def test_journal_schema_still_available():
    from polyprof.collect import journal

    assert journal.SCHEMA is journal.schema()
    assert journal.SCHEMA.names[:3] == ["kind", "name", "start_ns"]


def test_run_of_an_empty_script_imports_no_pandas_and_no_device_runtime(tmp_path):
    """`polyprof run --no-summary` of a script that imports nothing: the journal and the
    trace are written without pyarrow or pandas (trace/arrow_write.py), the OpenCL and
    torch plugins wait for their module's import, and the CLI's parser does not load
    the store's analyses. Nor does it import what cost a short run 5-20 ms each: psutil
    (the sampler reads /proc), numpy.ma (np.unique's first call), importlib.metadata
    (the entry-point scan), multiprocessing (the ranks' executors), subprocess
    (ctypes.util.find_library runs ldconfig), socket (the host name). What the run imported is read at the interpreter's exit,
    after the trace was saved."""
    script = tmp_path / "empty.py"
    seen = tmp_path / "modules.txt"
    script.write_text("import atexit, sys\n"
                      f"atexit.register(lambda: open({str(seen)!r}, 'w').write("
                      "' '.join(m for m in ('pandas', 'pyopencl', 'torch', 'jax', 'pyarrow', 'psutil', 'numpy.ma', "
                      "'importlib.metadata', 'multiprocessing', 'subprocess', 'socket') if m in sys.modules)))\n")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "e.polyprof"),
                        str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "e.polyprof").is_file()
    assert seen.read_text().split() == []


def test_loading_a_kineto_trace_does_not_import_the_xspace_reader():
    """Sniffing a .json.gz for XSpace imported the whole XSpace reader (protobuf and its
    C walker: about 10 ms of a fresh process, a fifth of a small trace's load); Kineto's
    JSON starts with "\\n{", which fails the walk's first tests without it."""
    traces = Path(__file__).resolve().parent / "data" / "traces"
    code = ("import sys, polyprof; "
            f"[polyprof.load(p) for p in sorted(__import__('pathlib').Path({str(traces / 'kineto')!r}).glob('*.gz'))]; "
            "print(sorted(m for m in sys.modules if 'xspace' in m))")
    out = child(code)
    assert out.strip() == "[]"


def test_the_xspace_sniff_shortcut_agrees_with_the_walk():
    import random

    from polyprof.formats.registry import _is_xspace
    from polyprof.formats.xspace import is_protobuf_xspace

    rng = random.Random(5)
    heads = [b"\n{\n  \"a\": 1}", b"\n[", b"\n\x08\x01", b"\n\x05\x12\x03abc"]
    heads += [bytes([0x0A] + [rng.randrange(256) for _ in range(rng.randrange(1, 12))]) for _ in range(5000)]
    for head in heads:
        path = Path(__file__)  # any file: only its size is read, as a bound
        assert _is_xspace(head, path) == is_protobuf_xspace(head, path.stat().st_size), head
        assert _is_xspace(b"GZ" + head, path) == is_protobuf_xspace(head, None), head


def test_summary_of_an_xspace_imports_no_numpy_ma():
    """`polyprof summary` of the shared XSpace files (TPU and GPU): no analysis, reader or
    terminal table calls ``np.unique`` without an index or inverse, whose first call
    imports numpy.ma (about 20 ms of a summary's 0.25 s CPU; ``trace.sorting.unique``
    instead); nor pandas, pyarrow or orjson (the store's manifest, collectives' JSON args)."""
    data = Path(__file__).resolve().parent / "data"
    files = [data / "traces" / "xspace" / "tpu_inference_2.xplane.pb",
             *sorted((data / "peers" / "tracelens").glob("*.xplane.pb"))]
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            f"for f in {[str(f) for f in files]!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(['summary', f]) == 0\n"
            "print(sorted(m for m in ('numpy.ma', 'pandas', 'pyarrow', 'orjson') if m in sys.modules))")
    out = child(code)
    assert out.strip() == "[]"


def test_summary_of_kineto_traces_and_of_a_job_imports_no_numpy_ma():
    """Nor for the shared Kineto traces, one by one and as one job (a directory of ranks):
    NumPy's ``median`` and ``percentile`` (on more than a few thousand values) import
    numpy.ma too, so the analyses use ``trace.sorting.median`` and a partition (about
    6 ms of a summary's 0.1-0.2 s CPU). Nor the nsys stats CSV reader, whose sniff every
    JSON head has a comma for (3-7 ms), by a file
    (a directory is asked whether it holds ``nsys stats -o`` reports)."""
    data = Path(__file__).resolve().parent / "data"
    files = [*sorted((data / "traces" / "kineto").glob("*.json.gz")), data / "peers" / "hta_trace_compare" / "base"]
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            f"for f in {[str(f) for f in files]!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(['summary', f]) == 0\n"
            "    if f.endswith('.gz'): csv = 'polyprof.formats.nsys_csv' in sys.modules\n"
            "print(sorted(m for m in ('numpy.ma', 'pandas', 'pyarrow') if m in sys.modules) + ['nsys_csv'] * csv)")
    assert child(code).strip() == "[]"


def test_summary_of_a_small_job_imports_no_rich_and_forks_nothing():
    """A job's summary prints through textout as a trace's does (rich's console: ~15 ms),
    and a small job (two ranks of a few kB: ``ranks.executor.small_job``) is worked on in
    this process: no multiprocessing (~7 ms), no pool, no reader ahead."""
    job = Path(__file__).resolve().parent / "data" / "traces" / "gloo"
    assert _absent(job, ("rich", "rich.console", "multiprocessing", "numpy.ma", "numpy.typing")) == []


def test_summary_of_an_xspace_defines_only_the_pinned_dataclasses():
    """A dataclass compiles its generated methods when its module is imported (0.3 ms
    each in a fresh process). NamedTuples: the records a summary's analyses pass among
    themselves (the registry's ``Analysis``, flops' ``Costs`` and ``Op``), the immutable
    values (the analysed ``Window``, a device's ``Peak``), the formats' registry entries
    and read limits; plain classes: the records of NumPy columns (steps, correlation,
    projection, memory events, the window's selection, the device view, the longest path,
    the terminal's paragraphs). The modules a summary of an XSpace imports define only
    these dataclasses (mutable records, and the schema's, whose fields the writers and
    ``dataclasses.replace`` read), and each writes its own ``__init__``, ``__repr__`` and
    ``__eq__``, so none compiles generated methods (tests/test_schema_records.py); a new
    one on this path fails here."""
    trace = Path(__file__).resolve().parent / "data" / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
    code = ("import sys, io, contextlib, dataclasses\nfrom polyprof.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(trace)!r}]) == 0\n"
            "print(' '.join(sorted(f'{n}.{k}' for n, m in list(sys.modules.items())\n"
            "    if n.startswith('polyprof.') for k, v in vars(m).items()\n"
            "    if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == n)))")
    out = child(code)
    assert out.split() == ["polyprof.analyze.finding.Finding", "polyprof.report.tables.Report",
                           "polyprof.trace.core.Trace", "polyprof.trace.model.Plane", "polyprof.trace.model.Source",
                           "polyprof.trace.model.Track"]


def test_summary_of_an_xspace_without_graphs_ranges_or_collectives_skips_their_modules():
    """The registry checks a trace for CUDA graph launches, CUPTI ranges and collectives
    (analyze/inputs.py) before importing the analyses that read them: a GPU XSpace
    without any gets their declared empty tables (tests/test_analysis_inputs.py) and
    never imports those four modules (about 1 ms of a fresh process); nor the memory
    bound of ranks/fits.py, which only a store or a JSON trace is checked against."""
    trace = Path(__file__).resolve().parent / "data" / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(trace)!r}]) == 0\n"
            "print(sorted(m for m in ('analyze.cuda_graphs', 'analyze.cupti_ranges', 'analyze.collectives',\n"
            "    'analyze.transfers', 'ranks.fits') if 'polyprof.' + m in sys.modules))")
    assert child(code).strip() == "[]"


def test_summary_modules_compile_no_rarely_used_pattern_at_import():
    """A regular expression compiled at import costs 50-150 us: the window's step range
    (only with --steps), devops' TensorFlow/JAX name patterns (not on a GPU trace),
    HTA's kernel kinds, a wrapped cell's trailing space and XLA's kernel names (only in a
    command buffer without its HLO) are kept as text and compiled on first use (re's cache)."""
    from polyprof.analyze import devops, hta_compat, hta_tables, window
    from polyprof.formats.xspace import gpu
    from polyprof.report import textout

    for pattern in (window._RANGE, devops._TF_NAME, devops._TF_TYPE, devops._JAX_TYPE, hta_compat._NOT_COMPUTE,
                    hta_tables._COMM, hta_tables._MEMORY, textout._TRAILING_SPACE, gpu._XLA_KERNEL):
        assert isinstance(pattern, str), pattern


def test_read_only_commands_start_numpy_without_a_blas_thread_pool():
    """`polyprof summary` imports NumPy with OpenBLAS at one thread (lowlevel/blas.py): no
    pool thread is left in the process, and the environment is as it was; a value the
    user set is kept."""
    trace = Path(__file__).resolve().parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"
    code = ("import os, sys, io, contextlib\nfrom polyprof.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(trace)!r}]) == 0\n"
            "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OPENBLAS_NUM_THREADS", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "None"]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(env, OPENBLAS_NUM_THREADS="2"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[1] == "2"


def test_summary_runs_without_collections_and_turns_the_collector_back_on():
    """`polyprof summary` runs with the cyclic collector off (lowlevel/heap.py,
    pause_for_command): not one collection during the command, and the collector is on
    again when ``main`` returns (it was on before)."""
    trace = Path(__file__).resolve().parent / "data" / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
    code = ("import gc, io, contextlib\nfrom polyprof.cli import main\nn = [0]\n"
            "gc.callbacks.append(lambda phase, info: n.__setitem__(0, n[0] + (phase == 'start')))\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(trace)!r}]) == 0\n"
            "print(n[0], gc.isenabled())")
    out = child(code)
    assert out.split() == ["0", "True"]


def test_summary_written_to_a_pipe_or_a_terminal_imports_no_rich():
    """`polyprof summary` writes its text through report/textout.py, which prints what
    rich's Console would (tests/test_textout.py) without importing rich: about 13 ms
    of CPU in a fresh process, a tenth of a small trace's whole summary. Both plain
    and in colour (FORCE_COLOR: as on a terminal)."""
    data = Path(__file__).resolve().parent / "data"
    files = [data / "traces" / "xspace" / "tpu_inference_2.xplane.pb", data / "traces" / "kineto" / "sampled_rank0.json.gz"]
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            f"for f in {[str(f) for f in files]!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "        assert main(['summary', f]) == 0\n"
            "    assert 'Findings' in out.getvalue()\n"
            "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))")
    for extra in ({}, {"FORCE_COLOR": "1", "COLUMNS": "100"}):
        assert child(code, **extra).strip() == "[]", extra


def _absent(trace: Path, modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` that a fresh interpreter's ``polyprof summary trace`` imported."""
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(trace)!r}]) == 0\n"
            f"print(' '.join(m for m in {modules!r} if m in sys.modules))")
    return child(code).split()


def _stamps_older_than_sources() -> bool:
    """Whether some C source in this tree was written since its extension's stamp (a
    checkout changed since its build_ext): then the loader hashes it, with hashlib."""
    from polyprof.lowlevel import compiled

    for stamp in SRC.glob("polyprof/**/_*.stamp"):
        made = stamp.stat().st_mtime_ns
        if any(p.stat().st_mtime_ns >= made for p in compiled.sources(stamp.parent, stamp.stem)):
            return True
    return False


#: what no summary needs: the recorder of a profiled program's sections (and its compiled
#: ``_unseen``), ldconfig's subprocess (lowlevel/libc.py), OpenSSL for the extensions'
#: stamps (lowlevel/compiled.py), gzip for a head zlib already gave, the builder of
#: derived lines (a summary derives none), the JSON records of ``--json``, numpy.typing
#: (annotations only), HTA's own computations (only for its window, ``--span device``)
NO_SUMMARY_NEEDS = ("polyprof.collect.recorder", "polyprof.lowlevel.unseen", "subprocess", "ctypes.util", "gzip",
                    "hashlib", "polyprof.derive.lines", "polyprof.report.json_records", "numpy.typing",
                    "polyprof.analyze.hta_compat", "polyprof.analyze.hta_tables")


#: what a summary of a trace without memory events or sections does not import: the
#: memory tables (the registry's check, analyze/inputs.py, gives their empty tables),
#: the memory events they read
WITHOUT_MEMORY = ("polyprof.analyze.memory", "polyprof.trace.memory")


def test_summary_of_a_kineto_trace_imports_no_other_formats_reader_nor_what_no_summary_needs():
    """`polyprof summary` of a Kineto trace (gzipped): the sniffs of rocprofv3's JSON and of
    torch's memory timeline test the head's bytes before importing their readers (with
    msgspec's typed records, the ROCm parts, orjson), and nothing in NO_SUMMARY_NEEDS."""
    trace = Path(__file__).resolve().parent / "data" / "traces" / "kineto" / "triton_example.json.gz"
    skip = ("hashlib",) if _stamps_older_than_sources() else ()
    modules = tuple(m for m in NO_SUMMARY_NEEDS if m not in skip) + (
        "polyprof.formats.rocprof_json", "polyprof.formats.rocm_trace", "polyprof.formats.parts",
        "polyprof.formats.torch_memory_timeline") + WITHOUT_MEMORY
    assert _absent(trace, modules) == []


@pytest.mark.parametrize("name, hlo, memory", [("peers/tracelens/jax_conv_minimal_08.xplane.pb", True, True),
                                               ("traces/xspace/tpu_inference_2.xplane.pb", False, True),
                                               ("jax_cpu/jax_cpu_steps.xplane.pb", True, False)])
def test_summary_of_an_xspace_imports_nothing_no_summary_needs(name: str, hlo: bool, memory: bool):
    """Nor, for an XSpace without allocator events (``MemoryAllocation``), the memory
    tables and XProf's memory events (formats/xprof_memory.py); nor, for a TPU's, the HLO
    decoder (formats/xspace/hlo.py), which a GPU's needs: its kernels' framework ops are
    its HLO instructions' (XProf's rule)."""
    trace = Path(__file__).resolve().parent / "data" / name
    skip = ("hashlib",) if _stamps_older_than_sources() else ()
    modules = tuple(m for m in NO_SUMMARY_NEEDS if m not in skip) + (
        () if hlo else ("polyprof.formats.xspace.hlo",)) + (
        () if memory else ("polyprof.formats.xprof_memory",) + WITHOUT_MEMORY)
    assert _absent(trace, modules) == []
