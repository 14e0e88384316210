"""The native ``.polyprof`` writer's old place: it is the Trace's own serialisation and
lives on the trace floor now (trace/native_write.py); re-exported here for code that
imports it from formats."""

from ..trace.native_write import MAGIC, VERSION, SMALL_TRACE_BYTES, save

__all__ = ["MAGIC", "SMALL_TRACE_BYTES", "VERSION", "save"]
