"""Reading the reports of one path: which files, which tables in them, and the Trace."""

from __future__ import annotations

import logging
import mmap
from pathlib import Path
from typing import Any

from ...errors import TraceFormatError
from ...trace.core import Trace
from ..parts import Part
from . import build as B
from .sections import OLD_NAMES, TRACE_REPORTS, Table, read_table, report_named, scan, sniff

log = logging.getLogger("polyprof")


def report_files(path: Path) -> list[Path]:
    """The ``.csv`` files in ``path`` that are ``nsys stats`` reports (by their content)."""
    try:
        items = sorted(q for q in path.iterdir() if q.is_file() and q.name.endswith(".csv"))
    except OSError:
        return []
    out = []
    for q in items:
        try:
            with open(q, "rb") as f:
                head = f.read(4096)
        except OSError:
            continue
        if sniff(head, q):
            out.append(q)
    return out


def runs(path: Path) -> list[Path]:
    """The first report of each ``PREFIX_`` among a directory's trace reports (the GPU
    trace first), in the order of their prefixes."""
    first: dict[str, Path] = {}
    for q in report_files(path):
        report = report_named(q.name)
        if report in TRACE_REPORTS and (_prefix(q) not in first or report == "cuda_gpu_trace"):
            first[_prefix(q)] = q
    return [first[k] for k in sorted(first)]


def _files(path: Path) -> list[Path]:
    """The files of one run: a directory's reports, or a file and its ``PREFIX_`` siblings."""
    if path.is_dir():
        files = report_files(path)
        prefixes = {_prefix(q) for q in files if report_named(q.name) in TRACE_REPORTS}  # summaries: any prefix
        if len(prefixes) > 1:
            raise TraceFormatError(path, "the reports of several runs (" + ", ".join(sorted(prefixes))
                                   + "): give one of their files (its siblings are read with it)")
        if not files:
            raise TraceFormatError(path, "no nsys stats CSV reports here (PREFIX_cuda_gpu_trace.csv, ...)")
        return files
    report = report_named(path.name)
    if report not in TRACE_REPORTS:
        return [path]
    prefix = _prefix(path)
    sibs = [q for q in report_files(path.parent) if q != path and report_named(q.name) in TRACE_REPORTS
            and _prefix(q) == prefix]
    return [path, *sibs]


def _prefix(q: Path) -> str:
    report = report_named(q.name) or ""
    stem = q.name[:-4]
    for name in (report, *(k for k, v in OLD_NAMES.items() if v == report)):
        if stem.endswith(name):
            return stem[: len(stem) - len(name)]
    return stem


def read(path: Path) -> Trace:
    files = _files(path)
    found: dict[str, tuple[Path, Table, Any]] = {}
    summaries: list[str] = []
    notes: list[str] = []
    maps = []
    try:
        for f in files:
            mm, size = _map(f)
            maps.append(mm)
            got = scan(mm, size, report_named(f.name))
            for t in got.tables:
                name = t.report if t.report in TRACE_REPORTS else t.kind
                if t.kind == "summary":
                    summaries.append(t.report or f"{f.name}: a summary ({', '.join(t.cells[:3])}, ...)")
                    continue
                if t.cut:
                    notes.append(f"{f.name}: {name}: the last line is cut short (no end of line) and left out")
                if t.kind in found:
                    raise TraceFormatError(path, f"two {t.kind} reports ({found[t.kind][0].name} and {f.name}): "
                                                 "give the reports of one run")
                found[t.kind] = (f, t, mm)
        if not found:
            raise TraceFormatError(path, _no_trace(summaries))
        return _trace(path, found, summaries, notes)
    finally:
        for mm in maps:
            _close(mm)


def _no_trace(summaries: list[str]) -> str:
    if summaries:
        return ("nsys stats summary reports (" + ", ".join(dict.fromkeys(summaries)) + ") have no timeline: "
                "give polyprof the SQLite export (nsys export --type sqlite) or the *_trace reports "
                "(nsys stats -f csv -r cuda_gpu_trace,cuda_api_trace,nvtx_pushpop_trace)")
    return "no nsys stats trace report in this file (cuda_gpu_trace, cuda_api_trace, nvtx_pushpop_trace)"


def _map(f: Path) -> tuple[Any, int]:
    with open(f, "rb") as fh:
        size = fh.seek(0, 2)
        if not size:
            return b"", 0
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), size


def _close(mm: Any) -> None:
    if isinstance(mm, mmap.mmap):
        try:
            mm.close()
        except BufferError:  # a parser's buffer still refers to it: closed when collected
            pass


def _trace(path: Path, found: dict[str, tuple[Path, Table, Any]], summaries: list[str], notes: list[str]) -> Trace:
    parts: list[Part] = []
    info: list[str] = []
    gpus: dict[int, dict[str, Any]] = {}
    tnames: dict[tuple[int, int], str] = {}
    counted = 0
    for kind in ("cuda_api_trace", "cuda_gpu_trace", "nvtx_pushpop_trace", "nvtx_gpu_proj_trace"):
        if kind not in found:
            continue
        if kind == "nvtx_gpu_proj_trace" and "nvtx_pushpop_trace" in found:
            info.append("nvtx_gpu_proj_trace not read: nvtx_pushpop_trace holds the same ranges")
            continue
        f, table, mm = found[kind]
        cols = read_table(f, mm, table, counted)
        counted += cols.n
        if kind == "cuda_gpu_trace":
            got, gpus = B.gpu_parts(cols)
            parts += got
        elif kind == "cuda_api_trace":
            part, dropped, tnames = B.api_part(cols)
            if dropped:
                info.append(f"{dropped} CUDA API rows repeat a call already read (same thread, name and "
                            "correlation id) and are left out")
            parts.append(part)
        else:
            part, unended = B.nvtx_part(cols, kind == "nvtx_gpu_proj_trace")
            if unended:
                notes.append(f"{kind}: {unended} NVTX ranges never ended and are left out")
            parts.append(part)
        del cols
    parts = [p.forward_times(notes) for p in parts]  # rows that end before they start: 0 ns, said
    if "cuda_gpu_trace" in found and "cuda_api_trace" not in found:
        notes.append("no cuda_api_trace report: device work is not linked to the CUDA calls that launched it")
    if summaries:
        info.append("summary reports not read (no timeline): " + ", ".join(dict.fromkeys(summaries)))
    md: dict[str, Any] = {"clock": "nsys session time (ns since the session start)",
                          "nsys": {"format": "nsys stats csv", "reports": sorted(found),
                                   "files": sorted({f.name for f, _, _ in found.values()}), "notes": info}}
    if notes:
        md["warnings"] = list(notes)
    for n in notes:
        log.warning("%s: %s", path, n)
    for n in info:
        log.info("%s: %s", path, n)
    return B.build(parts, gpus, tnames, path.name, md)


