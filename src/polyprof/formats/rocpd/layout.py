"""Which rocpd schema a database has, found by looking.

rocprofiler-sdk's rocpd (``rocprofv3 --output-format rocpd``, its default from ROCm 7)
writes each profiled run's tables with a suffix (``rocpd_kernel_dispatch<uuid>``) and
views without it; a merged database holds several suffixes, each with its own id
spaces. Two layouts are published (rocprofiler-sdk's ``rocpd_tables.sql`` under
``versions/``):

- 3.x: event tables carry ``nid``, ``pid``, ``tid`` (rows of ``rocpd_info_process`` /
  ``rocpd_info_thread``), ``agent_id``, ``queue_id``, ``stream_id`` themselves; an
  event's category is a ``rocpd_string``;
- 4.x: they carry a ``track_id`` into ``rocpd_track``, which holds those; categories
  are rows of ``rocpd_info_category``.

Either way ``start``/``end`` are ns, ``event_id`` leads to ``rocpd_event`` (category;
the internal correlation id in ``stack_id``, which ties a kernel or copy to its HIP
call, the external one in ``correlation_id``), names are ``rocpd_string`` rows or
kernel symbols.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sqlite_db import Schema, quote

#: the tables that make a database rocpd (beside its metadata)
MARKERS = ("rocpd_kernel_dispatch", "rocpd_region", "rocpd_memory_copy")
#: read by this reader (every suffix)
READ = ("rocpd_metadata", "rocpd_string", "rocpd_info_node", "rocpd_info_process", "rocpd_info_thread",
        "rocpd_info_agent", "rocpd_info_queue", "rocpd_info_stream", "rocpd_info_kernel_symbol",
        "rocpd_info_category", "rocpd_track", "rocpd_event", "rocpd_region", "rocpd_kernel_dispatch",
        "rocpd_memory_copy")


@dataclass
class Run:
    """One suffix's tables (one profiled run)."""

    suffix: str
    schema: Schema

    def t(self, base: str) -> str:
        return base + self.suffix

    def has(self, base: str, *cols: str) -> bool:
        return self.schema.has(self.t(base), *cols)

    @property
    def tracked(self) -> bool:
        """4.x: events point to ``rocpd_track`` rows."""
        return self.has("rocpd_kernel_dispatch", "track_id") or self.has("rocpd_region", "track_id")

    def where(self, base: str, col: str) -> str:
        """SQL for a column of an event table's row: the row's own, or its track's (4.x)."""
        if self.has(base, col):
            return quote(col)
        if self.has(base, "track_id") and self.has("rocpd_track", col):
            return f"(SELECT {quote(col)} FROM {quote(self.t('rocpd_track'))} WHERE id = track_id)"
        return "NULL"

    def correlation(self, base: str) -> str:
        """SQL for the id that ties a device op to its launching call: rocprofiler-sdk's
        internal correlation id, which its writer keeps in ``rocpd_event.stack_id``
        (``correlation_id`` holds the external id, 0 unless the program set one); a row
        without a ``stack_id`` falls back to ``correlation_id``."""
        if not self.has(base, "event_id"):
            return "NULL"
        events = quote(self.t("rocpd_event"))
        if self.has("rocpd_event", "id", "stack_id", "correlation_id"):
            return f"(SELECT COALESCE(NULLIF(stack_id, 0), correlation_id) FROM {events} WHERE id = event_id)"
        for col in ("stack_id", "correlation_id"):
            if self.has("rocpd_event", "id", col):
                return f"(SELECT {col} FROM {events} WHERE id = event_id)"
        return "NULL"

    def category(self, base: str) -> str:
        if self.has(base, "event_id") and self.has("rocpd_event", "id", "category_id"):
            return f"(SELECT category_id FROM {quote(self.t('rocpd_event'))} WHERE id = event_id)"
        return "NULL"

    def unread(self) -> list[str]:
        return [name for name in self.schema.columns if name.endswith(self.suffix) and name not in self.schema.views
                and name[:len(name) - len(self.suffix) if self.suffix else None] not in READ]


def runs(tables: Schema) -> list[Run]:
    """The suffixes with event tables, as runs (tables, not views: each run's rows once)."""
    out = []
    for name in sorted(tables.columns):
        if name.startswith("rocpd_metadata") and name not in tables.views:
            suffix = name[len("rocpd_metadata"):]
            if any(m + suffix in tables.columns for m in MARKERS):
                out.append(Run(suffix, tables))
    if not out and any(m in tables.columns for m in MARKERS):  # views or plain tables, no metadata
        out.append(Run("", tables))
    return out


def is_rocpd(tables: Schema) -> bool:
    return any(n.startswith(MARKERS) for n in tables.columns)
