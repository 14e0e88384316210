"""Device peaks as data: peak FLOP/s per precision and memory bandwidth of an
accelerator, read from ``peaks.json`` (beside this module, each figure with its vendor
document), matched to a trace's device by name, overridable by hand.

A precision's peak is its tensor (matrix) unit's where the device has one, else its
vector units'; ``fp32`` on an NVIDIA GPU is the vector peak (TF32 is its own
precision, used only when asked for: ``--peak`` or ``precision=``).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, TypeVar

from ..derive.memo import memo
from ..errors import PeakError
from ..trace.core import Trace
from ..trace import metadata_keys as mkeys

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
_UNITS = ("tensor", "vector")
#: every rate a device entry may give, in FLOP/s (OP/s for int8), and ``hbm`` in bytes/s
RATE_KEYS = tuple(f"{p}_{u}" for p in PRECISIONS for u in _UNITS) + ("hbm",)


class Peak(NamedTuple):  # not a frozen dataclass: made at every start (docs/benchmarks.md, issue 35)
    """One device's peaks: ``rates`` maps :data:`RATE_KEYS` to FLOP/s (bytes/s for
    ``hbm``); ``source`` the documents they are from (and ``--peak`` where overridden)."""

    model: str
    rates: Mapping[str, float] = MappingProxyType({})
    units: int = 0
    unit_kind: str = ""
    source: str = ""

    def flops(self, precision: str) -> float:
        """Peak FLOP/s of ``precision`` (tensor unit first, then vector), 0 if unknown;
        precision "" (not known: an XLA op) is the device's main one, bf16 where it has
        a bf16 unit, else fp32."""
        if not precision:
            return self.flops("bf16") or self.flops("fp32")
        for u in _UNITS:
            v = self.rates.get(f"{precision}_{u}", 0.0)
            if v:
                return float(v)
        return 0.0

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s, 0 if unknown."""
        return float(self.rates.get("hbm", 0.0))


@lru_cache(maxsize=1)
def table() -> tuple[dict[str, Any], ...]:
    """The device entries of ``peaks.json``, in matching order."""
    with open(Path(__file__).with_name("peaks.json"), encoding="utf-8") as f:
        return tuple(json.load(f)["devices"])


def _peak(entry: Mapping[str, Any]) -> Peak:
    return Peak(entry["model"], {k: float(entry[k]) for k in RATE_KEYS if k in entry}, int(entry.get("units", 0)),
                entry.get("unit_kind", ""), entry.get("source", ""))


def match(name: str) -> Peak | None:
    """The peaks of the device called ``name`` (e.g. Kineto's ``NVIDIA A100-PG509-200``),
    or None: the first entry one of whose lists of substrings all occur in the name."""
    low = f" {name.lower()} "
    for e in table():
        if any(all(s in low for s in words) for words in e["match"]):
            return _peak(e)
    return None


def device_properties(trace: Trace) -> list[Mapping[str, Any]]:
    """The device descriptions a trace gives: its device planes' properties (Kineto's
    deviceProperties ride on the planes; XSpace's ``device_type_string``), then the
    ``deviceProperties`` of the trace's metadata (and of torch's, for a live session)."""
    out: list[Mapping[str, Any]] = [p.properties for p in trace.planes if p.kind == "device" and p.properties]
    props = list(trace.metadata.get(mkeys.DEVICE_PROPERTIES) or [])
    torch_md = trace.metadata.get(mkeys.TORCH)
    if isinstance(torch_md, dict):
        props += list(torch_md.get("deviceProperties") or [])
    return out + [d for d in props if isinstance(d, dict)]


#: where a device's properties give its name: Kineto's deviceProperties, an XSpace device
#: plane's (a TPU's ``device_type_string``, a GPU's ``gpu_device_name``: "NVIDIA H200")
_NAME_KEYS = ("name", "device_type_string", "gpu_device_name", "device_name")


def _name(props: Mapping[str, Any]) -> str:
    return next((v for v in (props.get(k) for k in _NAME_KEYS)
                 if isinstance(v, str) and v), "")


def device_names(trace: Trace) -> list[str]:
    """The device names a trace gives (:func:`device_properties`), in that order."""
    return [n for n in map(_name, device_properties(trace)) if n]


def match_properties(props: Mapping[str, Any]) -> Peak | None:
    """The peaks of the device ``props`` describe (deviceProperties): by its name
    (:func:`match`), else by an entry's ``match_props``; a device with an exact fraction
    of the entry's units (``numSms``: one die of a two-die MI250, a partition) gets
    that fraction of each rate."""
    name = _name(props)
    found = match(name) if name else None
    if found is None:
        low = {k: v.lower() if isinstance(v, str) else v for k, v in props.items()}
        found = next((_peak(e) for e in table() for cond in e.get("match_props", ())
                      if all(low.get(k) == v for k, v in cond.items())), None)
    units = props.get("numSms")
    if (found is None or not isinstance(units, int) or isinstance(units, bool) or not 0 < units < found.units
            or found.units % units):
        return found
    k = units / found.units
    return found._replace(rates={r: v * k for r, v in found.rates.items()}, units=units,
                   source=f"{found.source}; {units} of its {found.units} {found.unit_kind}s: {k:g} of each rate")


def _plane_peaks(trace: Trace, found: Peak | None) -> Peak | None:
    """XProf's own peaks where a device plane carries them (``peak_teraflops_per_second``,
    bf16 on a TPU; ``peak_hbm_bw_gigabytes_per_second``) over the table's."""
    for p in trace.planes:
        props = p.properties or {}
        tf, bw = props.get("peak_teraflops_per_second"), props.get("peak_hbm_bw_gigabytes_per_second")
        if p.kind == "device" and isinstance(tf, (int, float)) and tf > 0:
            base = found or Peak(str(props.get("device_type_string") or p.name))
            rates = {**base.rates, "bf16_tensor": float(tf) * 1e12}
            if isinstance(bw, (int, float)) and bw > 0:
                rates["hbm"] = float(bw) * 1e9
            return base._replace(rates=rates, source=f"the trace's device plane {p.name} (XProf's peaks)")
    return found


def parse_override(text: str) -> dict[str, float]:
    """``"bf16=989e12,hbm=3.35e12"`` -> rates. A bare precision (``bf16``) sets its
    tensor peak; ``bf16_vector`` and the other :data:`RATE_KEYS` name one unit."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = part.partition("=")
        key = key.strip().lower()
        key = f"{key}_tensor" if key in PRECISIONS else key
        if not eq or key not in RATE_KEYS:
            raise PeakError(f"--peak {part!r}: expected NAME=VALUE with NAME one of "
                            f"{', '.join(PRECISIONS)}, hbm or PRECISION_tensor/_vector")
        try:
            v = float(val)
        except ValueError:
            raise PeakError(f"--peak {part!r}: {val!r} is not a number (FLOP/s or bytes/s, e.g. 989e12)") from None
        if not v > 0 or v == float("inf"):
            raise PeakError(f"--peak {part!r}: the peak must be a positive finite number")
        out[key] = v
    return out


_P = TypeVar("_P")


def _distinct(props: list[_P]) -> list[_P]:
    """``props`` without repeats, in order (eight GPUs of one model describe themselves
    alike: the table is matched once for them, not eight times)."""
    out: list[_P] = []
    for p in props:
        if not any(p == q for q in out):
            out.append(p)
    return out


def device_peak(trace: Trace, override: str | Mapping[str, float] | None = None) -> Peak | None:
    """The peaks of the trace's (first recognised) device, with ``override`` (text as
    :func:`parse_override` reads it, or rates) put over them; None when no device is
    recognised and nothing is given."""
    over = parse_override(override) if isinstance(override, str) else dict(override or {})
    for k in over:
        if k not in RATE_KEYS:
            raise PeakError(f"peak {k!r}: expected one of {', '.join(RATE_KEYS)}")
    found = memo(trace, "device_peak", _matched)  # matched once per trace (op_efficiency, mfu, the findings)
    if not over:
        return found
    base = found or Peak("given by hand")
    src = f"{base.source}; " if base.source else ""
    named = sorted({p.partition("=")[0].strip().lower() for p in override.split(",") if p.strip()}) \
        if isinstance(override, str) else sorted(over)  # as the user wrote them (fp32, not fp32_tensor on a CPU)
    return base._replace(rates={**base.rates, **over}, source=f"{src}given: {', '.join(named)}")


def _matched(trace: Trace) -> Peak | None:
    """The peaks of the trace's first recognised device, XProf's own over them."""
    found = next((p for p in map(match_properties, _distinct(device_properties(trace))) if p is not None), None)
    return _plane_peaks(trace, found)


#: the peaks given for the tables computed now (``--peak``): see :func:`using`
_GIVEN: ContextVar[str | Mapping[str, float] | None] = ContextVar("polyprof_peak", default=None)


@contextmanager
def using(override: str | Mapping[str, float] | None) -> Iterator[None]:
    """Within it, the efficiency tables use these peaks over the matched device's (the
    text of ``--peak``, or rates); checked at once, so a bad value fails before any work."""
    if isinstance(override, str):
        parse_override(override)
    token = _GIVEN.set(override)
    try:
        yield
    finally:
        _GIVEN.reset(token)


#: the environment variable ``--peak`` sets (worker processes of a job's summary inherit it)
ENV = "POLYPROF_PEAK"


def given() -> str | Mapping[str, float] | None:
    """The peaks :func:`using` set, else those of ``POLYPROF_PEAK``, else None."""
    v = _GIVEN.get()
    return v if v is not None else (os.environ.get(ENV) or None)
