"""The torch plugin's captures: each torch recording of the session (its own, or one
cycle of a ``polyprof.torch.profile`` drop-in), the clock-sync markers bracketed into it,
and what is kept of it once it ends: torch's results read in memory (activities.py),
else torch's JSON export in a temporary folder (removed at collect), plus the memory
categories and the ``keep_export`` copy. A part of :class:`~.plugin.TorchPlugin`."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import TYPE_CHECKING, Any

from ...collect.clock import now_ns
from .align import Capture
from .hooks import Ranges, imported_torch, recording_survived

# ingest (the clock-sync marker's name), activities and memory are imported once torch
# recorded: every session's discovery imports this module (through plugin.py)

LOST = "the torch recording was ended by another torch.profiler in the program"

_SYNC_REPEATS = 3



class ExportDir:
    """A directory for torch's exports, removed by :meth:`remove` or once nothing holds
    it (or at the interpreter's exit): the plugin's own (:meth:`Captures._export_dir`),
    and a ``polyprof.torch.profile`` drop-in's, which the torch plugin of the session it
    ran in holds too until it has read its cycles (``DropIns.done``): a drop-in the
    program let go of (``p`` bound to the next one in a loop, then collected) took its
    cycles with it, and the plugin's collect failed."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="polyprof-torch-")
        self.remove = weakref.finalize(self, shutil.rmtree, self.path, True)


class Captures:
    """The captures' methods of :class:`~.plugin.TorchPlugin` (which holds their state)."""

    _lock: Any  # a threading.RLock
    _captures: list[Capture]
    _exports: ExportDir | None
    options: dict[str, Any]

    if TYPE_CHECKING:
        def _warn(self, msg: str) -> None: ...

        def _ensure_ranges(self, torch: Any) -> Ranges: ...

    # ------------------------------------------------------------------ used by the drop-in
    def new_capture(self) -> Capture:
        with self._lock:
            cap = Capture(len(self._captures))
            self._captures.append(cap)
            return cap

    def sync(self, cap: Capture | None = None) -> None:
        """Emit bracketed clock-sync markers into the running torch recording."""
        torch = imported_torch()
        if torch is None:
            return
        from .ingest import SYNC_NAME

        r = self._ensure_ranges(torch)
        cap = cap if cap is not None else (self._captures[-1] if self._captures else self.new_capture())
        enter, exit_ = r.enter, r.exit
        for _ in range(_SYNC_REPEATS):
            a = now_ns()
            h = enter(SYNC_NAME)
            b = now_ns()
            exit_(h)
            cap.samples.append((a, b))

    def _keep(self, prof: Any, cap: Capture) -> None:
        """The recording our own torch profiler just ended: read from torch's results in
        memory where torch hands them out (activities.py: no JSON written and read back),
        else through torch's export. ``keep_export`` still writes torch's JSON."""
        from . import activities  # the Kineto reader's modules: imported only when torch recorded

        keep = self.options.get("keep_export")
        if recording_survived(prof):
            try:
                cap.trace = activities.read(prof)
            except Exception as e:  # reported; torch's export is read instead
                self._warn(f"torch's results could not be read in memory ({type(e).__name__}: {e}); "
                           "reading its JSON export instead")
        if cap.trace is None:
            self.export(prof, cap)
            return
        self._memory_categories(prof, cap)
        if keep:
            import torch

            name = f"torch_{id(self):x}_cycle{cap.index}.json"
            try:
                os.makedirs(keep, exist_ok=True)
                torch.profiler.profile.export_chrome_trace(prof, os.path.join(keep, name))
            except Exception as e:  # the user's copy: its failure costs only the copy
                self._warn(f"torch's JSON was not written to {keep}: {type(e).__name__}: {e}")

    def _memory_categories(self, prof: Any, cap: Capture) -> None:
        try:
            from .memory import categories_of

            cap.mem_categories = categories_of(prof)
        except Exception as e:  # torch's private memory profile: its failure costs only the categories
            self._warn(f"no memory categories from torch: {type(e).__name__}: {e}")

    def export(self, prof: Any, cap: Capture | None = None, directory: str | None = None) -> None:
        """Export torch's trace of the capture that just ended (called before any user
        on_trace_ready handler, so its own exports and files stay untouched)."""
        import torch

        cap = cap if cap is not None else self._captures[-1]
        if not recording_survived(prof):
            # another torch.profiler in the program ended this recording: torch has no
            # trace for it, and exporting that empty result crashes the process
            cap.lost = LOST
            self._warn(LOST + "; its torch ops are lost")
            return
        # a driver's directory is the driver's to clean (it hands the file out later)
        folder = directory or self._export_dir()
        path = os.path.join(folder, f"torch_{id(self):x}_cycle{cap.index}.json")
        torch.profiler.profile.export_chrome_trace(prof, path)
        cap.path = path
        self._memory_categories(prof, cap)
        keep = self.options.get("keep_export")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(path, os.path.join(keep, os.path.basename(path)))

    def _export_dir(self) -> str:
        """Where torch's exports go until they are read: made at the first export only
        (a recording read from memory writes none). Removed at collect; also when a
        plugin that is never collected (failed stop, conformance checks) is
        garbage-collected or the interpreter exits."""
        if self._exports is None:
            self._exports = ExportDir()
        return self._exports.path

    def _cleanup(self) -> None:
        if self._exports is not None:
            self._exports.remove()
            self._exports = None
