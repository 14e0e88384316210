"""The numbers the perfetto_read modules share: the kinds of the collector's event rows
(``collector.py``, ``gpu_events.py``; ``slices.py`` and ``build.py`` pair begins and ends by
them) and the field number of ``TracePacket.timestamp`` (trace.proto)."""

BEGIN, END, INSTANT, COMPLETE = 1, 2, 3, 5
P_TIMESTAMP = 8  # TracePacket.timestamp
