"""Nsight Systems' ``nsys stats`` CSV trace reports as a Trace.

What people keep when they have no SQLite export: ``nsys stats --format csv --report
cuda_gpu_trace,cuda_api_trace,nvtx_pushpop_trace`` printed to a file (with its
``Processing [...]`` preamble and NOTICE lines, the reports one after the other), or the
files ``nsys stats -f csv -o PREFIX`` writes (``PREFIX_cuda_gpu_trace.csv``...), or their
directory. The reports of one path are one trace on one clock (nsys session time, ns).
Read: ``cuda_gpu_trace`` (kernels, memcpys, memsets), ``cuda_api_trace`` (CUDA calls,
linked to the device work by correlation id), ``nvtx_pushpop_trace`` and
``nvtx_gpu_proj_trace`` (NVTX ranges: sections). The summaries (``*_sum``) have no
timeline: a file of summaries only is refused naming them. ``sections`` finds and parses
the tables, ``build`` makes the Trace as formats/nsys/ makes the SQLite export's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..safety import guarded
from .sections import TRACE_REPORTS, report_named, sniff

if TYPE_CHECKING:
    from ...trace.core import Trace

__all__ = ["load", "sniff", "is_output_dir", "runs_in"]


def is_output_dir(path: Path) -> bool:
    """A directory holding ``nsys stats`` trace reports (``-o PREFIX``'s files)."""
    from .reader import report_files  # looks into the files: only for a directory

    return any(report_named(q.name) in TRACE_REPORTS for q in report_files(path))


def runs_in(path: Path) -> list[Path]:
    """One report file per run (``PREFIX_``) of a directory of ``nsys stats`` reports, its
    GPU trace where it has one (read with its siblings): the ranks of a job for ranks/,
    one per prefix (``rank0_cuda_gpu_trace.csv``, ``rank1_...``)."""
    from .reader import runs  # looks into the files: only for a directory

    return runs(path)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read ``nsys stats`` CSV trace reports: one file (a report, or ``nsys stats``'s
    printed output), one of ``-o PREFIX``'s files (with its siblings), or their directory."""
    from .reader import read  # the reader (pyarrow, the Trace's builder): only once a file is read

    return read(Path(path))
