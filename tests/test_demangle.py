"""C++ kernel names demangled by one function (``polyprof.lowlevel.demangle``) for the
CUPTI plugin and the file readers that keep names mangled (nvprof: tests/test_nvprof.py;
RPD). Expected names come from binutils' c++filt, or from the C++ runtime's
``__cxa_demangle`` called here apart from polyprof's code."""

from __future__ import annotations

import ctypes
import ctypes.util
import gzip
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.lowlevel.demangle import demangle

DATA = Path(__file__).parent / "data" / "rpd"
#: NCCL's (and RCCL's) kernels as nvprof stored them (tests/data/peers/blinkplus_nccl/)
NCCL = ("_Z33ncclBroadcastRingLLKernel_copy_i88ncclColl", "_Z33ncclAllReduceTreeLLKernel_sum_i328ncclColl")


def _cxa(name: str) -> str | None:
    """``__cxa_demangle`` of ``name`` (None: the runtime here does not demangle it)."""
    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    lib.__cxa_demangle.restype = ctypes.c_char_p  # (leaks the few strings: a test)
    status = ctypes.c_int(0)
    got = lib.__cxa_demangle(name.encode(), None, None, ctypes.byref(status))
    return got.decode() if status.value == 0 and got else None


def _cxxfilt(names: list[str]) -> list[str]:
    if not shutil.which("c++filt"):
        return [_cxa(n) or n for n in names]
    return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_the_plugin_and_the_readers_share_one_demangler():
    from polyprof.plugins.cupti import decode

    assert decode.demangle is demangle
    assert _cxxfilt(list(NCCL)) == [demangle(n) for n in NCCL] == [
        "ncclBroadcastRingLLKernel_copy_i8(ncclColl)", "ncclAllReduceTreeLLKernel_sum_i32(ncclColl)"]
    assert demangle("_Z9addKernelPiPKiS1_") == "addKernel(int*, int const*, int const*)" == _cxxfilt(
        ["_Z9addKernelPiPKiS1_"])[0]
    for plain in ("gemm_tile", "_Zgarbage", "", "_Z3foo\0junk", "_Z\udcff"):
        assert demangle(plain) == plain  # not mangled, not valid, a NUL, not encodable: kept


@pytest.fixture(scope="module")
def vllm_rpd(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rpd") / "mytrace.rpd"
    out.write_bytes(gzip.decompress((DATA / "mytrace.rpd.gz").read_bytes()))
    return out


def test_rpd_kernels_keep_the_names_cxa_demangle_gives(vllm_rpd):
    """A vLLM decode on ROCm (tests/data/rpd/mytrace.rpd.gz): 4 of its kernels' descriptions
    are mangled (ck_tile's, vLLM's paged attention: 2,048 ops); each reads as this
    machine's C++ runtime demangles it (GCC 12's knows no ``DF16_``, _Float16, and no
    ``TnPFT_``; newer ones do: the name then stays as recorded), every op's name from SQL."""
    with sqlite3.connect(f"file:{vllm_rpd}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT s.string, count(*) FROM rocpd_op o JOIN rocpd_string s ON s.id = o.description_id "
                            "JOIN rocpd_string t ON t.id = o.opType_id WHERE t.string IN ('KernelExecution', 'Task') "
                            "GROUP BY s.string").fetchall()
    assert sorted(c for n, c in rows if n.startswith("_Z")) == [64, 640, 640, 704]
    t = polyprof.load(vllm_rpd)
    k = np.flatnonzero(t.categories() == "kernel")
    want = Counter({(_cxa(n) or n) if n.startswith("_Z") else n: c for n, c in rows})
    assert Counter(t.names()[k].tolist()) == want and sum(want.values()) == 1228 + 7720


def test_an_rpd_kernel_recorded_mangled_reads_demangled(tmp_path):
    """RCCL's broadcast kernel recorded under its mangled name (the description of the
    matmul run's most frequent kernel changed to it): read as c++filt prints it."""
    p = tmp_path / "mangled.rpd"
    shutil.copyfile(DATA / "matmul_result.rpd", p)
    with sqlite3.connect(p) as conn:
        (sid,) = conn.execute("SELECT id FROM rocpd_string WHERE string LIKE 'void at::native::(anonymous "
                              "namespace)::CatArrayBatchedCopy<%' AND string NOT LIKE '%aligned16%'").fetchone()
        conn.execute("UPDATE rocpd_string SET string = ? WHERE id = ?", (NCCL[0], sid))
    t = polyprof.load(p)
    k = np.flatnonzero(t.categories() == "kernel")
    names = Counter(t.names()[k].tolist())
    assert names[_cxxfilt([NCCL[0]])[0]] == 6 and names[NCCL[0]] == 0
    assert sum(names.values()) == 29


def test_an_nsys_export_with_only_the_mangled_name_reads_demangled(tmp_path):
    """tests/data/nsys/saxpy_2022.sqlite with its kernels' ``demangledName`` and
    ``shortName`` columns dropped (an export that keeps only ``mangledName``): the kernel
    reads as c++filt prints ``_Z5saxpyPdS_S_di``, not as the mangled symbol."""
    p = tmp_path / "mangled_only.sqlite"
    shutil.copyfile(Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite", p)
    with sqlite3.connect(p) as conn:
        (stored, n), = conn.execute("SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                    "ON s.id = k.mangledName GROUP BY s.value").fetchall()
        for col in ("demangledName", "shortName"):
            conn.execute(f"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN {col}")
    assert (stored, n) == ("_Z5saxpyPdS_S_di", 5)
    t = polyprof.load(p)
    k = np.flatnonzero(t.categories() == "kernel")
    assert Counter(t.names()[k].tolist()) == {_cxxfilt([stored])[0]: 5} == {"saxpy(double*, double*, double*, double, int)": 5}


def _b36(j: int) -> str:
    digits, out = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""
    while True:
        out, j = digits[j % 36] + out, j // 36
        if not j:
            return out


def test_a_file_whose_names_expand_exponentially_is_read_in_bounded_time(tmp_path) -> None:
    """A crafted name whose substitutions double at each level (240 characters: 889 MB
    and 28 s of `polyprof summary` of an RPD file holding it) stays as given; the file's
    other names are demangled, the real ones as the runtime here gives them."""
    import sqlite3
    import time

    import polyprof
    from polyprof.lowlevel.demangle import IN_PROCESS, demangle_all

    hostile = "_Z1f1AIiiE" + "".join(f"S_IS{_b36(j)}_S{_b36(j)}_E" for j in range(23))
    ident = "averylongidentifier" * 10  # a real-looking name longer than IN_PROCESS
    long_ok = f"_Z3fooIN1a{len(ident)}{ident}EEvT_"
    assert len(hostile) > IN_PROCESS and len(long_ok) > IN_PROCESS
    t0 = time.perf_counter()
    got = demangle_all([hostile, long_ok, "_Z6kernelPfi", "plain"])
    assert got[0] == hostile and got[2:] == ["kernel(float*, int)", "plain"]
    assert got[1] == (f"void foo<a::{ident}>(a::{ident})" if demangle("_Z6kernelPfi") != "_Z6kernelPfi" else long_ok)
    assert time.perf_counter() - t0 < 10
    p = tmp_path / "hostile.rpd"  # the RPD fixture with one kernel renamed so
    p.write_bytes((DATA / "matmul_result.rpd").read_bytes())
    with sqlite3.connect(p) as conn:
        sid = conn.execute("SELECT description_id FROM rocpd_op WHERE opType_id IN (SELECT id FROM rocpd_string "
                           "WHERE string = 'KernelExecution') LIMIT 1").fetchone()[0]
        conn.execute("UPDATE rocpd_string SET string = ? WHERE id = ?", (hostile, sid))
    t0 = time.perf_counter()
    assert hostile in polyprof.load(p).strings
    assert time.perf_counter() - t0 < 10


def test_a_huge_mangled_name_stays_as_given() -> None:
    """A hostile file's name nested thousands deep is not handed to the runtime's
    recursive demangler."""
    from polyprof.lowlevel.demangle import MAX_MANGLED, demangle

    deep = "_Z1f" + "PFv" * (MAX_MANGLED // 3) + "E" * (MAX_MANGLED // 3)
    assert demangle(deep) == deep


def test_without_a_child_long_names_stay_as_given_saying_why(monkeypatch, caplog) -> None:
    """A frozen application (no interpreter to start apart): long names stay mangled, the
    short ones are demangled, and the warning says why."""
    import sys

    from polyprof.lowlevel.demangle import demangle_all

    ident = "averylongidentifier" * 10
    long_ok = f"_Z3fooIN1a{len(ident)}{ident}EEvT_"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with caplog.at_level("WARNING", logger="polyprof"):
        got = demangle_all([long_ok, "_Z6kernelPfi"])
    assert got[0] == long_ok and got[1] in ("kernel(float*, int)", "_Z6kernelPfi")
    assert "1 of 1 long C++ names are left mangled: no Python interpreter" in caplog.text


def test_a_lower_address_space_limit_still_demangles(tmp_path) -> None:
    """Under a hard address-space limit below the child's own (``ulimit -v``), the child
    keeps the lower one instead of failing to set its own."""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (450_000_000, 450_000_000))\n"
            "from polyprof.lowlevel.demangle import demangle_all, demangle\n"
            "i = 'averylongidentifier' * 10\n"
            "n = f'_Z3fooIN1a{len(i)}{i}EEvT_'\n"
            "print(demangle_all([n])[0] == demangle(n))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", r.stderr[-2000:]
