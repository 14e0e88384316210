"""The device layer: everything the cupti plugin asks of CUPTI, through cupti-python.

One small class, so a test can put a fake in its place (tests/test_cupti.py does, as
no GPU is there) while the plugin above it runs unchanged. What it does:

- (why CUPTI cannot run here, in one line, is availability.py's);
- take CUPTI's one subscriber slot (``cuptiSubscribe``), which tells whether another
  tool already holds CUPTI (torch.profiler/Kineto, Nsight Systems, ...);
- enable and disable activity kinds, switch thread ids to the system's (gettid);
- register the buffer callbacks of a sink (buffers.py): the C callbacks with the
  libcupti cupti-python loaded, or cupti-python's own Python callbacks;
- flush (``cuptiActivityFlushAll``), read ``cuptiGetTimestamp``.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any, Sequence

from . import layout
from .availability import first_line as _first_line
from .buffers import IMPLEMENTATION, CSink, PySink

log = logging.getLogger("polyprof")

def _noop_callback(*args: Any) -> None:
    """The subscriber's callback: no callback domain is ever enabled."""


class CuptiDevice:
    """CUPTI through cupti-python (and, for the C sink, the libcupti it loaded)."""

    def __init__(self) -> None:
        from cupti import cupti as binding

        self.binding = binding
        self._subscriber: int | None = None
        self._lib: ctypes.CDLL | None = None

    # ------------------------------------------------------------------ subscriber
    def subscribe(self) -> str | None:
        """Take CUPTI's subscriber slot; None, or why not in one line."""
        try:
            self._subscriber = self.binding.subscribe(_noop_callback, None)
            return None
        except self.binding.cuptiError as e:
            text = str(e)
            if "MULTIPLE_SUBSCRIBERS" in text or str(layout.ERROR_MULTIPLE_SUBSCRIBERS) in text:
                return ("another tool already holds CUPTI (torch.profiler/Kineto, JAX's profiler, "
                        "Nsight Systems or Compute, cuda-gdb...)")
            return f"CUPTI refused a subscriber ({_first_line(e)})"
        except Exception as e:
            return f"CUPTI does not run here ({_first_line(e)})"

    def unsubscribe(self) -> None:
        if self._subscriber is not None:
            sub, self._subscriber = self._subscriber, None
            self.binding.unsubscribe(sub)

    # ------------------------------------------------------------------ activity
    def system_thread_ids(self) -> None:
        self.binding.set_thread_id_type(layout.THREAD_ID_TYPE_SYSTEM)

    def enable(self, kind: int) -> None:
        if kind in (layout.DEVICE, layout.CONTEXT):  # also the devices and contexts made before start
            self.binding.activity_enable_and_dump(kind)
            return
        if kind == layout.UNIFIED_MEMORY_COUNTER:
            self._configure_unified_memory()
        self.binding.activity_enable(kind)

    def _configure_unified_memory(self) -> None:
        """CUPTI records unified-memory counters only once told which: transfers
        (HtoD, DtoH, DtoD) and page faults (CPU, GPU), every device of the process."""
        import numpy as np

        counters = (1, 2, 3, 4, 8)  # CUpti_ActivityUnifiedMemoryCounterKind
        cfg = np.zeros(len(counters), self.binding.activity_unified_memory_counter_config_dtype)
        cfg["scope"] = 2  # CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_ALL_DEVICES
        cfg["kind"] = counters
        cfg["enable"] = 1
        self.binding.activity_configure_unified_memory_counter(cfg.ctypes.data, len(cfg))

    def disable(self, kind: int) -> None:
        self.binding.activity_disable(kind)

    def flush(self) -> None:
        self.binding.activity_flush_all(layout.FLUSH_FORCED)

    def timestamp(self) -> int:
        return int(self.binding.get_timestamp())

    def library_path(self) -> str:
        """The libcupti cupti-python loaded (NVTX's injection library, the C sink's functions)."""
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return str(load_nvidia_dynamic_lib("cupti").abs_path)

    def _address(self, name: str) -> int:
        if self._lib is None:
            self._lib = ctypes.CDLL(self.library_path())
        return int(ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value or 0)

    def sink(self, implementation: str = IMPLEMENTATION, buffer_bytes: int = 8 << 20,
             not_kept: Sequence[tuple[int, int]] = ()) -> CSink | PySink:
        """A sink with its callbacks registered with CUPTI; ``not_kept``: the (kind, cbid)
        of the runtime and driver calls it counts and leaves out."""
        if implementation == "c":
            sink = CSink(self._address("cuptiActivityGetNextRecord"),
                         self._address("cuptiActivityGetNumDroppedRecords"), buffer_bytes, not_kept)
            rc = sink.register(self._address("cuptiActivityRegisterCallbacks"))
            if rc != 0:
                raise RuntimeError(f"cuptiActivityRegisterCallbacks returned CUptiResult {rc}")
            return sink
        py = PySink(buffer_bytes, not_kept)
        self.binding.activity_register_callbacks(py.request, py.complete)
        return py
