"""Writers that need the analyses or the derived lines: beside report/, above the
readers (docs/architecture.md, floors).

- ``kineto``: Kineto JSON, where torch traces open (HTA, TensorBoard's torch plugin);
- ``perfetto``: Perfetto protobuf, streamed;
- ``xspace`` (with ``xspace_stats``, ``xspace_plane``): XSpace for XProf and TensorBoard,
  with the stats XProf's tools read (``xprof_stats``: kernel details, framework ops,
  steps, from polyprof's analyses) and the planes and lines it expects (``xprof_names``).

Writers that only encode a Trace (the native ``.polyprof`` file, Chrome JSON, Parquet)
stay in formats/ beside their readers. ``polyprof.export`` and ``polyprof export -f``
find every writer through ``formats/registry.py``.
"""

from .._lazy import lazy_names

__getattr__ = lazy_names(__name__, {})  # its submodules as attributes, on first use (_lazy.submodule)
