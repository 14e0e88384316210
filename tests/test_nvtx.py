"""NVTX through polyprof's own injection library (plugins/nvtx), without a GPU.

What runs for real: the built library (``_nvtxinject.c``), loaded by NVTX itself from
``NVTX_INJECTION64_PATH`` in the real ``nvtx`` package (annotate, push/pop, start/end,
mark, domains, registered strings, threads) under ``polyprof run``; and NVTX's core and
domain API as any NVTX-using program calls it: this test plays NVTX's side of the
injection ABI through ctypes (the export table, the module function tables of
nvtxDetail/nvtxTypes.h), then calls the handlers the library installed
(``nvtxRangePushA/W``, ``nvtxMarkA``, ``nvtxRangeStartEx``, ``nvtxDomainRangePushEx``
with a registered string ...).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from polyprof.plugins.nvtx import convert, recorder
from polyprof.plugins.nvtx.recorder import ENV, NvtxRecorder

ROOT = Path(__file__).resolve().parents[1]
needs_lib = pytest.mark.skipif(recorder.library_path() is None, reason="_nvtxinject not built (setup.py build_ext)")


# ----------------------------------------------------------------------------- NVTX's side of the ABI


class Attributes(ctypes.Structure):  # nvtxEventAttributes_v2
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16), ("category", ctypes.c_uint32),
                ("color_type", ctypes.c_int32), ("color", ctypes.c_uint32), ("payload_type", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", ctypes.c_uint64), ("message_type", ctypes.c_int32),
                ("message", ctypes.c_void_p)]


ASCII, UNICODE, REGISTERED = 1, 2, 3
MODULE_TABLE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_uint))
GET_EXPORT_TABLE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)


class Callbacks(ctypes.Structure):  # NvtxExportTableCallbacks
    _fields_ = [("struct_size", ctypes.c_size_t), ("get_module_function_table", MODULE_TABLE)]


class FakeNvtx:
    """One NVTX instance, as the NVTX headers compile into a program: function tables
    for the CORE (1) and CORE2 (5) modules, 16 slots each, handed to the injection."""

    SIZE = 16

    def __init__(self) -> None:
        self.slots = {m: (ctypes.c_void_p * (self.SIZE + 1))() for m in (1, 5)}
        self.tables = {m: (ctypes.c_void_p * (self.SIZE + 1))() for m in (1, 5)}
        for m, table in self.tables.items():
            for i in range(1, self.SIZE):
                table[i] = ctypes.addressof(self.slots[m]) + i * ctypes.sizeof(ctypes.c_void_p)

        @MODULE_TABLE
        def module_table(module, out_table, out_size):
            if module not in self.tables:
                return 0
            out_table[0] = ctypes.addressof(self.tables[module])
            out_size[0] = self.SIZE
            return 1

        self._module_table = module_table
        self.callbacks = Callbacks(ctypes.sizeof(Callbacks), module_table)

        @GET_EXPORT_TABLE
        def get_export_table(etid):
            return ctypes.addressof(self.callbacks) if etid == 1 else None

        self._get = get_export_table

    def attach(self, lib: ctypes.CDLL) -> int:
        init = lib.InitializeInjectionNvtx2
        init.argtypes, init.restype = [GET_EXPORT_TABLE], ctypes.c_int
        return int(init(self._get))

    def fn(self, module: int, cbid: int, restype, *argtypes):
        addr = self.slots[module][cbid]
        assert addr, f"the injection left slot {cbid} of module {module} empty"
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr)


def attributes(message: int | str | None, kind: int = ASCII, color: int = 0, category: int = 0) -> Attributes:
    a = Attributes(version=3, size=ctypes.sizeof(Attributes), category=category, color_type=1 if color else 0,
                   color=color, message_type=kind)
    if isinstance(message, str):
        buf = (ctypes.create_string_buffer(message.encode()) if kind == ASCII
               else ctypes.create_unicode_buffer(message))
        a._keep = buf  # type: ignore[attr-defined]
        a.message = ctypes.addressof(buf)
    else:
        a.message = message
    return a


@needs_lib
def test_core_and_domain_api_through_the_injection_abi():
    """Every handler, as NVTX calls it: ASCII, wide and registered messages, push/pop
    returning levels, start/end ids across threads, marks, domains; the columns
    recorded are the calls made, in order, on the session clock."""
    lib = recorder.library()
    nv = FakeNvtx()
    assert nv.attach(lib) == 1
    P, VP, A = ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(Attributes)
    push_a = nv.fn(1, 9, ctypes.c_int, ctypes.c_char_p)
    push_w = nv.fn(1, 10, ctypes.c_int, ctypes.c_wchar_p)
    push_ex = nv.fn(1, 8, ctypes.c_int, A)
    pop = nv.fn(1, 11, ctypes.c_int)
    mark_a = nv.fn(1, 2, None, ctypes.c_char_p)
    mark_w = nv.fn(1, 3, None, ctypes.c_wchar_p)
    start_a = nv.fn(1, 5, ctypes.c_uint64, ctypes.c_char_p)
    start_ex = nv.fn(1, 4, ctypes.c_uint64, A)
    end = nv.fn(1, 7, None, ctypes.c_uint64)
    create = nv.fn(5, 12, P, ctypes.c_char_p)
    create_w = nv.fn(5, 13, P, ctypes.c_wchar_p)
    register = nv.fn(5, 10, P, VP, ctypes.c_char_p)
    register_w = nv.fn(5, 11, P, VP, ctypes.c_wchar_p)
    d_push = nv.fn(5, 4, ctypes.c_int, VP, A)
    d_pop = nv.fn(5, 5, ctypes.c_int, VP)
    d_mark = nv.fn(5, 1, None, VP, A)
    d_start = nv.fn(5, 2, ctypes.c_uint64, VP, A)
    d_end = nv.fn(5, 3, None, VP, ctypes.c_uint64)
    name_category = nv.fn(1, 12, None, ctypes.c_uint32, ctypes.c_char_p)
    d_name_category = nv.fn(5, 8, None, VP, ctypes.c_uint32, ctypes.c_wchar_p)
    name_thread = nv.fn(1, 14, None, ctypes.c_uint32, ctypes.c_char_p)
    nv.fn(5, 15, None, VP)(None)  # nvtxInitialize
    dom = create(b"my domain")
    assert dom and create(b"my domain") == dom and create_w("my domain") == dom
    hello = register(dom, b"registered hello")
    assert hello and register_w(dom, "registered hello") == hello

    name_category(7, b"seven")
    name_category(7, b"seven, renamed")  # the latest name counts
    d_name_category(dom, 7, "domain seven")
    name_thread(threading.get_native_id(), b"named by NVTX")
    rec = NvtxRecorder()
    push_a(b"before the session")  # not recorded: recording has not started
    pop()
    t0 = time.perf_counter_ns()
    assert rec.start()
    assert push_a(b"outer") == 0
    assert push_w("w\u00e9ide \u2603") == 1
    mark_a(b"mark a")
    assert pop() == 1
    assert push_ex(attributes("ex", color=0xFF00FF00, category=7)) == 1
    assert pop() == 1
    assert pop() == 0
    assert d_push(dom, attributes(hello, REGISTERED)) == 0
    d_mark(dom, attributes("domain mark", UNICODE))
    mark_w("wide mark")
    assert d_pop(dom) == 0
    rid = start_a(b"across threads")
    ended = threading.Thread(target=end, args=(rid,))
    ended.start()
    ended.join()
    rid2 = d_start(dom, attributes("domain start", ASCII))
    d_end(dom, rid2)
    rid3 = start_ex(attributes(b"raw".decode(), ASCII))
    end(rid3)
    assert len({rid, rid2, rid3}) == 3 and 0 not in (rid, rid2, rid3)
    t1 = time.perf_counter_ns()
    rec.stop()
    push_a(b"after the session")  # not recorded
    cap = rec.take()
    assert cap is not None and cap.counts["dropped"] == 0
    ev = cap.events
    names = list(convert.texts(cap.strings, ev["name"]))
    K = recorder
    assert list(ev["kind"]) == [K.PUSH, K.PUSH, K.MARK, K.POP, K.PUSH, K.POP, K.POP, K.PUSH, K.MARK, K.MARK, K.POP,
                                K.START, K.END, K.START, K.END, K.START, K.END]
    assert [n for n, k in zip(names, ev["kind"]) if k != K.POP and k != K.END] == [
        "outer", "w\u00e9ide \u2603", "mark a", "ex", "registered hello", "domain mark", "wide mark",
        "across threads", "domain start", "raw"]
    assert (np.diff(ev["t"]) >= 0).all() and t0 <= ev["t"][0] and ev["t"][-1] <= t1
    assert set(ev["tid"].tolist()) == {threading.get_native_id(), ended.native_id}
    assert ev["tid"][12] == ended.native_id  # the END of "across threads"
    assert ev["color"][4] == 0xFF00FF00 and ev["category"][4] == 7
    doms = list(convert.texts(cap.strings, ev["domain"]))
    assert doms[7] == doms[8] == doms[10] == "my domain" and doms[0] == ""
    trace, counts = convert.build(cap, {threading.get_native_id(): "MainThread"})
    assert counts == {"ranges": 4, "ranges_open_at_stop": 0, "start_end_ranges": 3, "start_end_open_at_stop": 0,
                      "marks": 3}
    names_t = trace.names()
    ex = np.flatnonzero(names_t == "ex")
    assert list(trace.stats[convert.NVTX_CATEGORY_NAME].lookup(ex)[1]) == ["seven, renamed"]
    assert {trace.tracks[i].name for i in trace.events["track"]} >= {"MainThread"}  # the host's name first
    untold, _ = convert.build(cap, {})  # a thread the host does not know: NVTX's name for it
    assert "named by NVTX" in {untold.tracks[i].name for i in untold.events["track"]}


def test_push_pop_pairing_by_level():
    """Pops close the innermost push of their thread and domain; a pop before any push
    (opened before the session) and a push never popped pair with nothing."""
    P, O = recorder.PUSH, recorder.POP
    kind = np.array([O, P, P, O, P, P, O, P, O, O, P, P, O], np.int64)
    group = np.array([1, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2], np.int64)
    push, pop = convert.pair_push_pop(kind, group)
    # group 1: pop 0 before any push; push 1 and push 10 never popped; 2 .. 9 around 5 .. 6
    # group 2: pop 3 before any push; push 4 never popped; 7 .. 8, 11 .. 12
    assert sorted(zip(push.tolist(), pop.tolist())) == [(2, 9), (5, 6), (7, 8), (11, 12)]
    assert sorted(zip(push.tolist(), pop.tolist())) == brute_pairs(kind, group)


def brute_pairs(kind: np.ndarray, group: np.ndarray) -> list[tuple[int, int]]:
    stacks: dict[int, list[int]] = {}
    out = []
    for i, (k, g) in enumerate(zip(kind.tolist(), group.tolist())):
        st = stacks.setdefault(g, [])
        if k == recorder.PUSH:
            st.append(i)
        elif st:
            out.append((st.pop(), i))
    return sorted(out)


def test_push_pop_pairing_matches_a_stack_on_random_streams():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        kind = rng.choice([recorder.PUSH, recorder.POP], n).astype(np.int64)
        group = rng.integers(0, 3, n).astype(np.int64)
        push, pop = convert.pair_push_pop(kind, group)
        assert sorted(zip(push.tolist(), pop.tolist())) == brute_pairs(kind, group)


# ----------------------------------------------------------------------------- the real nvtx package

PROGRAM = r'''
import json, os, sys, threading, time
import nvtx

assert nvtx.enabled()
with nvtx.annotate("outer", color="blue"):
    time.sleep(0.002)
    with nvtx.annotate("inner", domain="my domain", category="cat"):
        nvtx.mark("checkpoint")
        time.sleep(0.003)
    nvtx.push_range("pushed", domain="my domain")
    time.sleep(0.001)
    nvtx.pop_range(domain="my domain")
rid = nvtx.start_range("overlapping")
time.sleep(0.001)

@nvtx.annotate()  # a decorator: the function's name, a registered string
def step():
    time.sleep(0.001)

def worker():
    with nvtx.annotate("in a thread"):
        step()

t = threading.Thread(target=worker, name="worker")
t.start(); t.join()
nvtx.end_range(rid)
open(os.environ["PROG_INFO"], "w").write(json.dumps({"domain": type(nvtx.get_domain("my domain")).__name__, "worker": t.native_id,
                  "main": threading.get_native_id()}))
'''


def run_program(tmp_path: Path, env_extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    pytest.importorskip("nvtx", reason="the nvtx package is not installed")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "out.polyprof"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["PROG_INFO"] = str(tmp_path / "info.json")
    env.update(env_extra or {})
    # the host plugin alone (it owns NVTX): on a GPU machine the default session's
    # other plugins load CUDA libraries, which emit NVTX ranges of their own
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=env, timeout=120)
    return p, out


@needs_lib
def test_nvtx_package_under_polyprof_run(tmp_path):
    """nvtx.annotate (nested, domains, categories, the decorator's registered strings),
    push/pop, start/end across a thread, marks: sections on their threads' tracks, beside
    polyprof's own, with the right nesting and times."""
    import polyprof

    p, out = run_program(tmp_path)
    assert p.returncode == 0, p.stderr
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["domain"] == "Domain"  # a real domain: a tool is attached
    t = polyprof.load(out)
    meta = t.metadata["nvtx"]
    assert meta["ranges"] == 5 and meta["marks"] == 1 and meta["start_end_ranges"] == 1, meta
    assert meta["dropped"] == 0 and meta["ranges_open_at_stop"] == 0
    ev = t.events
    names = t.names()
    rows = {str(n): i for i, n in enumerate(names)}
    for name in ("outer", "inner", "pushed", "checkpoint", "overlapping", "in a thread", "step"):
        assert name in rows, (name, sorted(rows))

    def span(name):
        i = rows[name]
        return int(ev["start_ns"][i]), int(ev["start_ns"][i] + ev["dur_ns"][i]), t.tracks[ev["track"][i]]

    o0, o1, otr = span("outer")
    i0, i1, itr = span("inner")
    p0, p1, _ = span("pushed")
    m0, _, mtr = span("checkpoint")
    assert otr.tid == itr.tid == mtr.tid == info["main"] and otr.kind == "thread"
    assert o0 < i0 <= m0 < i1 < p0 < p1 <= o1  # nesting and order
    assert i1 - i0 >= 3_000_000 and p1 - p0 >= 1_000_000 and o1 - o0 >= 6_000_000  # the sleeps inside
    w0, w1, wtr = span("in a thread")
    s0, s1, s_tr = span("step")
    assert wtr.tid == s_tr.tid == info["worker"] and wtr.name == "worker"
    assert w0 <= s0 < s1 <= w1 and s1 - s0 >= 1_000_000
    v0, v1, vtr = span("overlapping")
    assert vtr.name == convert.PROCESS_TRACK and v0 < w0 and w1 <= v1
    cat = t.categories()
    assert cat[rows["checkpoint"]] == "mark" and cat[rows["outer"]] == cat[rows["step"]] == convert.CAT_ANNOTATION
    dom = t.stats[convert.NVTX_DOMAIN].lookup(np.array([rows["inner"], rows["pushed"]]))[1]
    assert list(dom) == ["my domain", "my domain"]
    assert convert.NVTX_COLOR in t.stats and convert.NVTX_CATEGORY in t.stats
    assert list(t.stats[convert.NVTX_CATEGORY_NAME].lookup(np.array([rows["inner"]]))[1]) == ["cat"]
    # polyprof's section table sees them as sections
    from polyprof.analyze.frames import column
    from polyprof.analyze.sections import section_stats

    st = section_stats(t)
    assert {"outer", "inner", "pushed", "in a thread", "step", "overlapping"} <= set(column(st, "name"))


@needs_lib
def test_another_nvtx_tool_is_said_in_one_line(tmp_path):
    """NVTX_INJECTION64_PATH naming another tool (Nsight Systems'): one warning line,
    no NVTX recorded by polyprof, the program runs."""
    import polyprof

    other = tmp_path / "libToolsInjection64.so"
    other.write_bytes(b"")
    p, out = run_program(tmp_path, {ENV: str(other)})
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "another NVTX tool" in ln]
    assert len(lines) == 1 and str(other) in lines[0], p.stderr
    t = polyprof.load(out)
    assert t.metadata["nvtx"]["recorded"] == 0 and "another NVTX tool" in t.metadata["nvtx"]["why"]
    assert "outer" not in set(t.names())


def test_not_built_says_so(monkeypatch):
    monkeypatch.setenv("POLYPROF_PURE_PYTHON", "1")
    recorder.library_path.cache_clear()
    recorder.library.cache_clear()
    try:
        rec = NvtxRecorder()
        assert not rec.start() and not rec.other_tool
        assert rec.problem == ("polyprof's NVTX injection library is off (POLYPROF_PURE_PYTHON=1); "
                               "NVTX ranges are not recorded by it")
        assert os.environ.get(ENV) is None or ENV in os.environ
        assert not recorder.injects()
    finally:
        monkeypatch.delenv("POLYPROF_PURE_PYTHON")
        recorder.library_path.cache_clear()
        recorder.library.cache_clear()


# ----------------------------------------------------------------------------- NVTX's own headers

USER_C = r"""
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <time.h>
#include <wchar.h>

static void spin(long ns) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

/* NVTX's core and domain API, as a C++ extension or CUDA library calls it */
void work(void) {
    nvtxDomainHandle_t dom = nvtxDomainCreateA("c domain");
    nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "c registered");
    nvtxEventAttributes_t at = {0};
    at.version = NVTX_VERSION;
    at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    at.colorType = NVTX_COLOR_ARGB;
    at.color = 0xFF112233;
    at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    at.message.registered = reg;
    nvtxRangePushA("c outer");
    spin(2000000);
    nvtxRangePushW(L"c wide \u00e9");
    nvtxMarkA("c mark");
    spin(1000000);
    nvtxRangePop();
    nvtxDomainRangePushEx(dom, &at);
    spin(1000000);
    nvtxDomainRangePop(dom);
    nvtxRangeId_t id = nvtxRangeStartA("c start");
    spin(500000);
    nvtxRangeEnd(id);
    nvtxRangePop();
}
"""

SESSION = r"""
import ctypes, sys
import polyprof
with polyprof.profile(output=sys.argv[2]):
    ctypes.CDLL(sys.argv[1]).work()
"""


def nvtx_headers() -> Path | None:
    import glob

    for root in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"))]:
        if root and (Path(root) / "include" / "nvtx3" / "nvToolsExt.h").is_file():
            return Path(root) / "include"
    return None


@needs_lib
def test_core_api_from_nvtx_headers_in_a_session(tmp_path):
    """A shared library compiled with NVIDIA's own NVTX 3 headers (the CUDA toolkit's),
    called through ctypes inside ``polyprof.profile()``: NVTX's own loader finds polyprof's
    library, and the core calls (``nvtxRangePushA/W``, ``nvtxMarkA``, ``nvtxRangeStartA``)
    and domain calls with a registered string become sections, nested, with their times."""
    import shutil

    import polyprof

    inc = nvtx_headers()
    cc = shutil.which("cc") or shutil.which("gcc")
    if inc is None or cc is None:
        pytest.skip("no NVTX 3 headers (a CUDA toolkit) or no C compiler here")
    src, lib = tmp_path / "user.c", tmp_path / "libnvtxuser.so"
    src.write_text(USER_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{inc}", str(src), "-o", str(lib), "-ldl"], check=True)
    (tmp_path / "session.py").write_text(SESSION)
    out = tmp_path / "c.polyprof"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, str(tmp_path / "session.py"), str(lib), str(out)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    t = polyprof.load(out)
    ev, names = t.events, [str(n) for n in t.names()]
    rows = {n: i for i, n in enumerate(names)}
    assert {"c outer", "c wide \u00e9", "c mark", "c registered", "c start"} <= set(rows), names

    def span(n):
        i = rows[n]
        return int(ev["start_ns"][i]), int(ev["start_ns"][i] + ev["dur_ns"][i])

    o0, o1 = span("c outer")
    w0, w1 = span("c wide \u00e9")
    r0, r1 = span("c registered")
    m0, _ = span("c mark")
    assert o0 < w0 <= m0 < w1 < r0 < r1 <= o1
    assert o1 - o0 >= 4_500_000 and w1 - w0 >= 1_000_000 and r1 - r0 >= 1_000_000
    dom = t.stats[convert.NVTX_DOMAIN].lookup(np.array([rows["c registered"]]))[1]
    assert list(dom) == ["c domain"]
    assert t.metadata["nvtx"]["ranges"] == 3 and t.metadata["nvtx"]["start_end_ranges"] == 1


MAIN_C = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
void work(void);
int main(void) {  /* a program with no Python in it */
    void *lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    int (*start)(uint64_t) = (int (*)(uint64_t))dlsym(lib, "polyprof_nvtx_start");
    void (*counts)(uint64_t *) = (void (*)(uint64_t *))dlsym(lib, "polyprof_nvtx_counts");
    start(100);
    work();
    uint64_t c[5];
    counts(c);
    printf("%llu %llu %llu\n", (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2]);
    return 0;
}
"""


@needs_lib
def test_library_loads_in_a_program_without_python(tmp_path):
    """The library has no Python API in it: a C program compiled with NVTX's headers loads
    it through NVTX_INJECTION64_PATH and its calls are recorded (NVTX's instance attached)."""
    import shutil

    inc = nvtx_headers()
    cc = shutil.which("cc") or shutil.which("gcc")
    if inc is None or cc is None:
        pytest.skip("no NVTX 3 headers (a CUDA toolkit) or no C compiler here")
    (tmp_path / "user.c").write_text(USER_C)
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "nvtx_user"
    subprocess.run([cc, "-O1", f"-I{inc}", str(tmp_path / "main.c"), str(tmp_path / "user.c"), "-o", str(exe),
                    "-ldl"], check=True)
    env = {**os.environ, ENV: str(recorder.library_path())}
    p = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    recorded, dropped, attached = map(int, p.stdout.split())
    assert (recorded, dropped, attached) == (9, 0, 1)  # 3 pushes, 3 pops, a mark, a start, an end


@needs_lib
def test_bounded_buffer_drops_and_says_so(caplog, monkeypatch):
    """Beyond ``host.nvtx_max_events`` events are dropped, counted, and said in one warning
    line; what fits is in the trace, paired. A second session starts empty."""
    import polyprof

    monkeypatch.delenv(ENV, raising=False)
    nv = FakeNvtx()
    assert nv.attach(recorder.library()) == 1
    push = nv.fn(1, 9, ctypes.c_int, ctypes.c_char_p)
    pop = nv.fn(1, 11, ctypes.c_int)
    with caplog.at_level("WARNING", logger="polyprof"):
        with polyprof.profile(options={"host": {"nvtx_max_events": 6}}) as prof:
            assert os.environ[ENV] == str(recorder.library_path())
            for i in range(5):
                push(f"r{i}".encode())
                pop()
    assert ENV not in os.environ  # unset at stop
    t = prof.trace
    meta = t.metadata["nvtx"]
    assert (meta["recorded"], meta["dropped"], meta["ranges"]) == (6, 4, 3)
    assert sorted(str(n) for n in t.names() if str(n).startswith("r")) == ["r0", "r1", "r2"]
    said = [r.getMessage() for r in caplog.records if "NVTX events were dropped" in r.getMessage()]
    assert said == ["plugin host: 4 NVTX events were dropped beyond 6 (options host.nvtx_max_events)"]
    with polyprof.profile() as prof2:
        push(b"again")
        pop()
    assert prof2.trace.metadata["nvtx"]["recorded"] == 2 and "r0" not in set(prof2.trace.names())


@needs_lib
def test_threads_record_concurrently_without_losing_a_slot(monkeypatch):
    """Four threads push and pop at once (ctypes releases the GIL around each call, so the
    handlers race for slots and chunks): every event is recorded once, every range pairs
    on its own thread."""
    monkeypatch.delenv(ENV, raising=False)
    nv = FakeNvtx()
    nv.attach(recorder.library())
    push = nv.fn(1, 9, ctypes.c_int, ctypes.c_char_p)
    pop = nv.fn(1, 11, ctypes.c_int)
    n, names = 20_000, [f"t{i}".encode() for i in range(4)]
    tids: list[int] = []

    def work(name: bytes) -> None:
        tids.append(threading.get_native_id())
        for _ in range(n):
            push(name)
            pop()

    rec = NvtxRecorder()
    assert rec.start()
    threads = [threading.Thread(target=work, args=(nm,)) for nm in names]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec.stop()
    cap = rec.take()
    assert cap is not None and cap.counts["recorded"] == 8 * n and cap.counts["dropped"] == 0
    assert cap.counts["unfinished"] == 0
    trace, counts = convert.build(cap)
    assert counts["ranges"] == 4 * n and counts["ranges_open_at_stop"] == 0
    ev = trace.events
    by_thread = {trace.tracks[t].tid for t in np.unique(ev["track"])}
    assert by_thread == set(tids)
    names_of = trace.names()
    for t in np.unique(ev["track"]):
        assert len(set(names_of[ev["track"] == t])) == 1  # a thread's ranges carry its own name
