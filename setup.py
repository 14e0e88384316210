"""Builds the optional C extensions (everything else is declared in pyproject.toml):

- ``polyprof.collect._fastsection``: the compiled ``polyprof.section``;
- ``polyprof.formats.xspace._wire``: the columnar XSpace event decoder;
- ``polyprof.formats.kineto._args``: deferred Kineto args grouped by name in one walk;
- ``polyprof.formats.kineto._gather``: one field of many decoded Kineto events as a column;
- ``polyprof.formats.kineto._tokens``: slices of Kineto ``traceEvents`` tokenized into columns;
- ``polyprof.formats.kineto._nesting``: the slice enclosing each slice (flow binding), one loop;
- ``polyprof.formats.kineto._skip``: the extent of a long top-level Kineto JSON value, checked, in blocks;
- ``polyprof.plugins.opencl._profinfo``: OpenCL commands' profiling timestamps in one loop;
- ``polyprof.plugins.cupti._cuptibuf``: CUPTI's activity buffers kept and walked in C;
- ``polyprof.plugins.nvtx._nvtxinject``: polyprof's NVTX injection library (a plain shared
  library, no Python API: NVTX loads it by ``NVTX_INJECTION64_PATH``; polyprof reads it by ctypes);
- ``polyprof.formats.perfetto_read._walk``: Perfetto TracePackets walked into columns;
- ``polyprof.formats._perfetto_wire``: the Perfetto writer's varints and joins of encoded fields;
- ``polyprof.formats._kineto_memory``: Kineto's ``[memory]`` args read from the text as integer columns;
- ``polyprof.formats._sqlite_pages``: integer columns of SQLite tables read from the file's pages;
- ``polyprof.analyze._longest``: the two passes of the critical path's longest path;
- ``polyprof.analyze._nest``: the nesting depth and parent of spans on their threads, one loop;
- ``polyprof.lowlevel._unseen``: polyprof's threads and hooks kept out of the program's profilers;
- ``polyprof.lowlevel._heapcache``: a big load's large NumPy arrays made from freed pages (NumPy's
  C API looked up at import, as NumPy's ``import_array`` does: no NumPy needed to build it).

``optional=True``: without a C compiler the build warns and goes on, and polyprof uses
the pure-Python versions instead (``polyprof.collect.recorder.IMPLEMENTATION`` and
``polyprof.formats.xspace.decode.IMPLEMENTATION``, ``polyprof.formats.kineto.deferred.IMPLEMENTATION``,
``polyprof.formats.kineto.gather.IMPLEMENTATION``, ``polyprof.formats.kineto.tokenized.IMPLEMENTATION``,
``polyprof.formats.kineto.flows.IMPLEMENTATION``, ``polyprof.formats.kineto.toplevel.IMPLEMENTATION``,
``polyprof.formats.perfetto_read.walked.IMPLEMENTATION``,
``polyprof.formats.perfetto_wire.IMPLEMENTATION``, ``polyprof.formats.kineto_memory.IMPLEMENTATION``,
``polyprof.plugins.opencl.profinfo.implementation()``, ``polyprof.plugins.cupti.buffers.IMPLEMENTATION``,
``polyprof.plugins.nvtx.recorder.library()``, ``polyprof.formats.sqlite_db.IMPLEMENTATION``, ``polyprof.analyze.longest_path.IMPLEMENTATION``,
``polyprof.analyze.nesting.IMPLEMENTATION``,
``polyprof.lowlevel.unseen.IMPLEMENTATION``, ``polyprof.lowlevel.heap.IMPLEMENTATION`` say which is in use).
An in-place build (``build_ext --inplace``, ``pip install -e``) writes beside each module a
stamp of its sources; ``polyprof.lowlevel.compiled`` does not use a module whose sources
changed since (it warns to rebuild).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


#: the C headers several extensions include (their folder is on every include path)
LOWLEVEL = "src/polyprof/lowlevel"
SHARED = sorted(Path(LOWLEVEL).glob("_shared_*.h"))


class build_ext_stamped(build_ext):
    """Writes beside each extension a stamp of the sources it was built from (the rule of
    polyprof.lowlevel.compiled: ``name*.c`` and ``name*.h`` in its folder and the shared
    ``lowlevel/_shared_*.h``, hashed by name and bytes), so that a checkout changed since its last build uses its Python paths and
    says to rebuild rather than load a stale module."""

    def copy_extensions_to_source(self) -> None:  # --inplace, and pip install -e
        super().copy_extensions_to_source()
        for ext in self.extensions:
            name = ext.name.rpartition(".")[2]
            folder = Path(ext.sources[0]).parent  # the package's folder, where the module was copied
            if not list(folder.glob(name + ".*.so")) + list(folder.glob(name + ".*.pyd")):
                continue  # optional and not built
            h = hashlib.sha256()
            for p in sorted(q for q in folder.glob(name + "*") if q.suffix in (".c", ".h")) + SHARED:
                h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
            (folder / (name + ".stamp")).write_text(h.hexdigest() + "\n")

setup(cmdclass={"build_ext": build_ext_stamped}, ext_modules=[
    Extension("polyprof.collect._fastsection", ["src/polyprof/collect/_fastsection.c"], optional=True),
    Extension("polyprof.formats.xspace._wire",
              [f"src/polyprof/formats/xspace/{f}" for f in ("_wire.c", "_wire_read.c", "_wire_write.c")],
              depends=["src/polyprof/formats/xspace/_wire.h", *map(str, SHARED)], include_dirs=[LOWLEVEL],
              optional=True),
    Extension("polyprof.formats.kineto._args", ["src/polyprof/formats/kineto/_args.c"], optional=True),
    Extension("polyprof.formats.kineto._gather", ["src/polyprof/formats/kineto/_gather.c"], optional=True),
    Extension("polyprof.formats.kineto._tokens", ["src/polyprof/formats/kineto/_tokens.c"], optional=True),
    Extension("polyprof.formats.kineto._nesting", ["src/polyprof/formats/kineto/_nesting.c"], optional=True),
    Extension("polyprof.formats.kineto._skip", ["src/polyprof/formats/kineto/_skip.c"], optional=True),
    Extension("polyprof.plugins.opencl._profinfo", ["src/polyprof/plugins/opencl/_profinfo.c"], optional=True),
    Extension("polyprof.plugins.cupti._cuptibuf", ["src/polyprof/plugins/cupti/_cuptibuf.c"], optional=True),
    Extension("polyprof.plugins.nvtx._nvtxinject", ["src/polyprof/plugins/nvtx/_nvtxinject.c"], optional=True),
    Extension("polyprof.formats.perfetto_read._walk",
              [f"src/polyprof/formats/perfetto_read/{f}" for f in ("_walk.c", "_walk_parse.c", "_walk_tables.c",
                                                                   "_walk_match.c")],
              depends=["src/polyprof/formats/perfetto_read/_walk.h", *map(str, SHARED)], include_dirs=[LOWLEVEL],
              optional=True),
    Extension("polyprof.formats._perfetto_wire", ["src/polyprof/formats/_perfetto_wire.c"], optional=True),
    Extension("polyprof.formats._kineto_memory", ["src/polyprof/formats/_kineto_memory.c"],
              depends=list(map(str, SHARED)), include_dirs=[LOWLEVEL], optional=True),
    Extension("polyprof.formats._sqlite_pages", ["src/polyprof/formats/_sqlite_pages.c"], optional=True),
    Extension("polyprof.analyze._longest", ["src/polyprof/analyze/_longest.c"], depends=list(map(str, SHARED)),
              include_dirs=[LOWLEVEL], optional=True),
    Extension("polyprof.analyze._nest", ["src/polyprof/analyze/_nest.c"], depends=list(map(str, SHARED)),
              include_dirs=[LOWLEVEL], optional=True),
    Extension("polyprof.lowlevel._unseen", ["src/polyprof/lowlevel/_unseen.c"], optional=True),
    Extension("polyprof.lowlevel._heapcache", ["src/polyprof/lowlevel/_heapcache.c"], optional=True),
])
