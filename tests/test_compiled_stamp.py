"""polyprof.lowlevel.compiled: one rule for the optional C extensions, and a build older
than its sources is not used (a checkout changed since its last build_ext)."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest

from polyprof.lowlevel import compiled

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``stamped_pkg`` whose "compiled" module ``_fast`` is a Python file (what
    the rule compares is the sources beside it and the stamp, not the module's kind)."""
    pkg = tmp_path / "stamped_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_fast.py").write_text("VALUE = 1\n")
    (pkg / "_fast.c").write_text("/* the C source */\n")
    (pkg / "_fast_part.c").write_text("/* a second source of the same module */\n")
    (pkg / "_fast.h").write_text("/* its header */\n")
    (pkg / "_other.c").write_text("/* another module's: not part of _fast's stamp */\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("POLYPROF_PURE_PYTHON", raising=False)
    yield pkg
    for name in [m for m in sys.modules if m.startswith("stamped_pkg")]:
        del sys.modules[name]


def stamp(pkg: Path) -> None:
    (pkg / "_fast.stamp").write_text(compiled.digest(compiled.sources(pkg, "_fast")) + "\n")


def test_sources_are_the_modules_c_files_and_headers_then_the_shared_headers(package):
    shared = sorted(p.name for p in (SRC / "polyprof" / "lowlevel").glob("_shared_*.h"))
    assert "_shared_vec.h" in shared
    assert [p.name for p in compiled.sources(package, "_fast")] == ["_fast.c", "_fast.h", "_fast_part.c", *shared]
    assert compiled.sources(package, "_absent") == []  # no source of its own: nothing to compare


def test_a_module_built_from_these_sources_is_used(package):
    stamp(package)
    assert compiled.optional("stamped_pkg", "_fast").VALUE == 1


def test_a_module_older_than_its_sources_is_not_used_and_says_so(package, caplog):
    stamp(package)
    (package / "_fast_part.c").write_text("/* changed since the build */\n")
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert compiled.optional("stamped_pkg", "_fast") is None
    assert "stamped_pkg._fast is older than its C sources" in caplog.text
    assert "build_ext --inplace" in caplog.text


def test_sources_older_than_the_stamp_are_not_hashed_and_a_touched_one_is(package, monkeypatch):
    """make's rule first: where every source is older than the stamp nothing is read or
    hashed (the start of every command in a checkout); a source modified since (a
    rebase, an edit) is hashed, and one touched but unchanged still passes."""
    import os

    stamp(package)
    built = (package / "_fast.stamp").stat().st_mtime_ns
    for p in compiled.sources(package, "_fast"):
        if p.parent == package:  # the shared headers are the checkout's, older than this stamp
            os.utime(p, ns=(built - 10**9, built - 10**9))
    hashed = []
    real = compiled.digest
    monkeypatch.setattr(compiled, "digest", lambda paths: hashed.append(paths) or real(paths))
    assert compiled.optional("stamped_pkg", "_fast") is not None
    assert hashed == []
    os.utime(package / "_fast.h", ns=(built + 10**9, built + 10**9))  # touched, same bytes
    del sys.modules["stamped_pkg._fast"]
    assert compiled.optional("stamped_pkg", "_fast") is not None
    assert len(hashed) == 1


def test_another_modules_source_does_not_count(package):
    stamp(package)
    (package / "_other.c").write_text("/* changed */\n")
    assert compiled.optional("stamped_pkg", "_fast") is not None


def test_no_stamp_or_no_sources_is_not_compared(package):
    assert compiled.optional("stamped_pkg", "_fast") is not None  # a build before stamps
    stamp(package)
    for p in compiled.sources(package, "_fast"):
        if p.parent == package:  # an installed wheel: no sources beside the module
            p.unlink()
    assert compiled.optional("stamped_pkg", "_fast") is not None


def test_pure_python_and_missing_modules(package, monkeypatch):
    assert compiled.optional("stamped_pkg", "_absent") is None
    monkeypatch.setenv("POLYPROF_PURE_PYTHON", "1")
    assert compiled.optional("stamped_pkg", "_fast") is None


def test_this_checkouts_extensions_match_their_stamps():
    """setup.py's build_ext writes the stamps that the loader compares: every extension
    built in place in this tree was built from the sources beside it (CI builds in place)."""
    built = sorted(SRC.glob("polyprof/**/_*.*.so"))
    if not built:
        pytest.skip("no extension built in place in this tree")
    for so in built:
        name = so.name.split(".")[0]
        folder = so.parent
        if not (folder / (name + ".stamp")).is_file():
            pytest.fail(f"{so} has no stamp: setup.py's build_ext writes one beside each extension")
        module = ".".join(folder.relative_to(SRC).parts + (name,))
        if name == "_nvtxinject":  # a plain shared library NVTX loads (no Python module to import)
            continue
        assert not compiled.stale(importlib.import_module(module)), module
