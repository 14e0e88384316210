"""Which OpenCL devices here can compile a kernel.

An OpenCL driver can list a device yet fail to build any program for it: PoCL built
against an LLVM that does not know the host CPU (PoCL 3.0 from the pyopencl wheel on
AMD Zen 5 answers ``unknown target CPU 'generic'``) is one. The demo, the conformance
workload and the plugin's availability check ask here, so such a machine gets a reason
in one line instead of a failed build in the middle of a profile.

A probe builds a one-line kernel in a context of its own, once per device per process
(drivers cache the binary, so a repeated probe costs a context and a cache lookup).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from pyopencl import Device

log = logging.getLogger("polyprof")

PROBE_SOURCE = "__kernel void polyprof_probe(__global int *a) { a[get_global_id(0)] = 1; }"


def devices() -> list[Device]:
    """Every device of every OpenCL platform, in platform order."""
    import pyopencl as cl

    out: list[Device] = []
    for p in cl.get_platforms():
        try:
            out.extend(p.get_devices())
        except Exception:  # a platform with no device raises
            continue
    return out


def _short(text: str) -> str:
    """The line of a build log that says why (``error: ...``), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("error:"):
            return ln
    return lines[-1] if lines else "build failed"


_verdicts: dict[Device, str | None] = {}


def build_problem(device: Device) -> str | None:
    """None when ``device`` builds a trivial kernel, else the driver's reason in one line."""
    if device in _verdicts:
        return _verdicts[device]
    import pyopencl as cl

    log_text = ""
    with _stderr_kept_clean() as note:
        try:
            ctx = cl.Context([device])
            cl.Program(ctx, PROBE_SOURCE).build()
            why = None
        except Exception as e:  # a build failure, or a driver failing the probe itself
            log_text = str(e)
            why = _short(log_text) or type(e).__name__
        note.append(log_text)
    _verdicts[device] = why
    return why


_GENERATED = re.compile(r"^\d+ (?:error|warning)s? generated\.$")


@contextlib.contextmanager
def _stderr_kept_clean() -> Iterator[list[str]]:
    """The driver's compiler writes its diagnostics for the probe kernel straight to
    file descriptor 2 ("error: unknown target CPU", "1 error generated."): that would
    be the profiler writing into the program's stderr. fd 2 goes to a temporary file
    during the build; afterwards every line that is not part of the build's own log
    (anything another thread wrote meanwhile) is written back."""
    note: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2: nothing to protect
        yield note
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield note
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            data = tmp.read()
        known = {ln.strip() for ln in "\n".join(note).splitlines() if ln.strip()}
        keep = [ln for ln in data.splitlines(keepends=True)
                if ln.strip() and ln.decode(errors="replace").strip() not in known
                and not _GENERATED.match(ln.decode(errors="replace").strip())]
        if keep:
            os.write(2, b"".join(keep))


def first_compiling() -> tuple[Device | None, list[str]]:
    """The first device that compiles kernels, and for each device before it, why not
    (``"<device>: <reason>"``). No device at all gives ``(None, [])``."""
    problems: list[str] = []
    for dev in devices():
        why = build_problem(dev)
        if why is None:
            return dev, problems
        name = getattr(dev, "name", "?").strip()
        problems.append(f"{name}: {why}")
        log.debug("OpenCL device %s cannot compile kernels: %s", name, why)
    return None, problems


def context_spec(device: Device) -> str:
    """``"platform:device"`` indices for ``PYOPENCL_CTX`` (what create_some_context reads)."""
    import pyopencl as cl

    for pi, p in enumerate(cl.get_platforms()):
        try:
            devs = p.get_devices()
        except Exception:
            continue
        for di, d in enumerate(devs):
            if d == device:
                return f"{pi}:{di}"
    raise ValueError(f"device {device!r} is on no platform")
