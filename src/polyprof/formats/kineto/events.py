"""What the reader decodes of one trace event: phase codes and the msgspec structs.

Only the fields the reader uses are decoded (other keys are skipped while parsing);
``ts``, ``dur`` and ``args`` stay JSON text (``msgspec.Raw``): times are read to the ns
from their digits (``numbers.py``), args are decoded in batches (``args.py``,
``deferred.py``).
"""

from __future__ import annotations

from typing import Any

import msgspec

# phase codes
_X, _I, _B, _E, _C, _S, _T, _F, _M, _OTHER, _ASYNC_B, _ASYNC_E, _ASYNC_N = range(13)
_PHASES = {"X": _X, "i": _I, "I": _I, "B": _B, "E": _E, "C": _C, "s": _S, "t": _T, "f": _F, "M": _M,
           "b": _ASYNC_B, "e": _ASYNC_E, "n": _ASYNC_N}
_ASYNC_PHASES = {_ASYNC_B: "b", _ASYNC_E: "e", _ASYNC_N: "n"}
_PHASE_CODES: dict[Any, int] = dict(_PHASES)

#: the key in ``_Collector.skipped`` of objects with no field the reader reads (``{}``)
BLANK = "{}"
_NULL = msgspec.Raw(b"null")
_NO_ARGS = msgspec.Raw(b"{}")  # an event without "args" (this very object)


class _Event(msgspec.Struct, gc=False, omit_defaults=True):
    """The fields of a trace event the reader uses; other keys are skipped while parsing.

    ``ts`` and ``dur`` stay JSON text (exact ns from the digits, one NumPy parse per slice);
    so do ``args``, decoded in batches (:meth:`_Collector._flush_args`).
    """

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = _NULL
    dur: msgspec.Raw = _NULL
    args: msgspec.Raw = _NO_ARGS
    id: Any = None
    id2: Any = None
    bind_id: Any = None
    bp: Any = None
    flow_in: Any = None  # flow events v2: the slice ends (flow_in) or starts (flow_out) flow bind_id
    flow_out: Any = None


class _Document(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []


_DECODE_EVENTS = msgspec.json.Decoder(list[_Event]).decode
_DECODE_DOC_EVENTS = msgspec.json.Decoder(_Document).decode
_DECODE_ANY = msgspec.json.Decoder().decode
