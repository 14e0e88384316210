"""Device peaks as data: peak FLOP/s per precision and memory bandwidth of an
accelerator, read from ``peaks.json`` (beside this module, each figure with its vendor
document), matched to a trace's device by the whole words of its name (the most specific
entry wins; a name no entry fits, or that fits two alike, gets no peaks and a reason
rather than another device's), scaled to the units it reports (a MIG slice, one die),
overridable by hand.

A precision's peak is its tensor (matrix) unit's where the device has one, else its
vector units'; ``fp32`` on an NVIDIA GPU is the vector peak (TF32 is its own
precision, used only when asked for: ``--peak`` or ``precision=``).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, Sequence, TypeVar

import numpy as np

from ..derive.memo import memo
from ..errors import PeakError
from ..trace.categories import DEVICE_ACTIVITY
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

    def flops_each(self, precisions: np.ndarray | Sequence[str]) -> np.ndarray:
        """:meth:`flops` of each of ``precisions`` (float64), each distinct one looked up
        once: a row per op, of a few precisions."""
        texts = list(precisions.tolist() if hasattr(precisions, "tolist") else precisions)
        rate = {p: self.flops(p) for p in set(texts)}
        return np.fromiter(map(rate.__getitem__, texts), np.float64, len(texts))

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s, 0 if unknown."""
        return float(self.rates.get("hbm", 0.0))


@lru_cache(maxsize=1)
def table() -> tuple[dict[str, Any], ...]:
    """The device entries of ``peaks.json``."""
    with open(Path(__file__).with_name("peaks.json"), encoding="utf-8") as f:
        return tuple(json.load(f)["devices"])


def _words(text: str) -> frozenset[str]:
    """The whole words of a device name, lower-case, split at anything not a letter or
    digit: "NVIDIA A100-SXM4-80GB" -> a100, sxm4, 80gb, nvidia."""
    return frozenset(_WORD.findall(text.lower()))


_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=1)
def _lists() -> tuple[tuple[int, frozenset[str]], ...]:
    """(entry, its words) per list of words of each entry's ``match``."""
    return tuple((i, frozenset().union(*map(_words, words))) for i, e in enumerate(table()) for words in e["match"])


def _peak(entry: Mapping[str, Any]) -> Peak:
    return Peak(entry["model"], {k: float(entry[k]) for k in RATE_KEYS if k in entry}, int(entry.get("units", 0)),
                entry.get("unit_kind", ""), entry.get("source", ""))


def _candidates(name: str) -> list[int]:
    """The entries (positions in :func:`table`) the name ``name`` fits: those one of whose
    lists of words are all whole words of it, less those whose matching list another
    entry's matching list includes (the more specific wins: "H100 NVL" over "H100", so
    "NVIDIA H100 NVL" is no H100 SXM, and "l4" is no word of "NVIDIA L40S")."""
    have = _words(name)
    hits = [(i, w) for i, w in _lists() if w <= have]
    return list(dict.fromkeys(i for i, w in hits if not any(j != i and w < v for j, v in hits)))


def match(name: str) -> Peak | None:
    """The peaks of the device called ``name`` (e.g. Kineto's ``NVIDIA A100-PG509-200``),
    or None: the one entry it fits (:func:`_candidates`); None where it fits none, or
    several alike (:func:`match_properties` tells those apart by their units)."""
    found = _candidates(name)
    return _peak(table()[found[0]]) if len(found) == 1 else None


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
    """The peaks of the device ``props`` describe (deviceProperties), or None
    (:func:`identify` says why)."""
    return identify(props)[0]


def identify(props: Mapping[str, Any]) -> tuple[Peak | None, str]:
    """(peaks, "") of the device ``props`` describe, or (None, why not). By its name
    (:func:`_candidates`; of several entries alike, the one whose units equal those it
    reports, ``numSms``, else the one it is a whole fraction of), else by an entry's
    ``match_props``. A device that reports fewer units than its entry (one die of a
    two-die MI250, a partition, a MIG slice) gets that share of each rate (a MIG slice
    the share of the memory bandwidth its memory is: :func:`_share`); one that reports
    more is not that model: no peaks rather than another device's."""
    name = _name(props)
    units = props.get("numSms")
    units = units if isinstance(units, int) and not isinstance(units, bool) and units > 0 else 0
    fits = found = _candidates(name) if name else []
    if len(found) > 1 and units:
        entries = table()
        found = ([i for i in found if entries[i].get("units") == units]
                 or [i for i in found if int(entries[i].get("units", 0)) % units == 0])
    if len(found) == 1:
        pk: Peak | None = _peak(table()[found[0]])
    else:
        low = {k: v.lower() if isinstance(v, str) else v for k, v in props.items()}
        pk = next((_peak(e) for e in table() for cond in e.get("match_props", ())
                   if all(low.get(k) == v for k, v in cond.items())), None)
    if pk is None:
        if len(fits) > 1:
            alike = " and ".join(table()[i]["model"] for i in fits)
            return None, f"its name fits {alike} alike" + (f", and its {units} units do not tell them apart"
                                                           if units else "")
        return None, "no entry of analyze/peaks.json names it" if name else ""
    if not units or not pk.units or units == pk.units:
        return pk, ""
    if units > pk.units:
        return None, (f"it reports {units} {pk.unit_kind or 'unit'}s, more than the {pk.units} of the {pk.model} "
                      "its name matches: another model")
    return _share(pk, units, name), ""


#: a MIG instance's profile in a device name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb" (its memory, GB)
_MIG = re.compile(r"\bmig\s+\d+g\.(\d+)gb\b")


def _share(pk: Peak, units: int, name: str) -> Peak:
    """The peaks of a device that reports ``units`` of its entry's: that share of each
    rate (each SM or CU runs at the same clock); a MIG slice's memory bandwidth, that of
    its memory slices, the share of the GPU's memory its profile names (a 3g.20gb of an
    A100 40GB: 42 of 108 SMs, half the bandwidth) where the entry gives the memory."""
    k = units / pk.units
    rates = {r: v * k for r, v in pk.rates.items()}
    said = f"{units} of its {pk.units} {pk.unit_kind}s: {k:.3g} of each rate"
    mig = _MIG.search(name.lower())
    total = next((float(e.get("memory_gb", 0)) for e in table() if e["model"] == pk.model), 0.0)
    if mig and total and "hbm" in pk.rates:
        m = min(1.0, int(mig.group(1)) / total)
        rates["hbm"] = pk.rates["hbm"] * m
        said = f"a MIG slice, {said}, and {m:.3g} of the memory bandwidth ({mig.group(1)} of its {total:g} GB)"
    return pk._replace(rates=rates, units=units, source=f"{pk.source}; {said}")


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


#: the model of peaks given by hand (``--peak``) for a trace that names no device
BY_HAND = "given by hand"


def device_peak(trace: Trace, override: str | Mapping[str, float] | None = None) -> Peak | None:
    """The peaks of the trace's (first recognised) device, with ``override`` (text as
    :func:`parse_override` reads it, or rates) put over them; None when the trace names
    no device and nothing is given; a Peak of no rates (its ``source`` says why, after
    :data:`UNRECOGNISED`) where it names devices none of which is recognised."""
    over = parse_override(override) if isinstance(override, str) else dict(override or {})
    for k in over:
        if k not in RATE_KEYS:
            raise PeakError(f"peak {k!r}: expected one of {', '.join(RATE_KEYS)}")
    found = memo(trace, "device_peak", _matched)  # matched once per trace (op_efficiency, mfu, the findings)
    if not over:
        return found
    base = found or Peak(BY_HAND)
    src = f"{base.source}; " if base.source and not base.source.startswith(UNRECOGNISED) else ""
    named = sorted({p.partition("=")[0].strip().lower() for p in override.split(",") if p.strip()}) \
        if isinstance(override, str) else sorted(over)  # as the user wrote them (fp32, not fp32_tensor on a CPU)
    return base._replace(rates={**base.rates, **over}, source=f"{src}given: {', '.join(named)}")


#: the start of the ``source`` of a device's :class:`Peak` of no rates: why it has none
UNRECOGNISED = "no peaks: "


def _on_a_device(trace: Trace) -> bool:
    """Whether the trace has a device: a device's plane (one a window of a store's rank
    keeps where its steps launched nothing; CUPTI's range profiler's ranges, no kernels),
    or device activity."""
    return any(p.kind == "device" for p in trace.planes) or bool(len(trace.rows_of_kind(*DEVICE_ACTIVITY)))


def _matched(trace: Trace) -> Peak | None:
    """The peaks of the trace's first recognised device, XProf's own over them; where it
    names devices and none is recognised, a Peak of no rates naming the first and why
    (:data:`UNRECOGNISED`: not in the table, or fits several entries alike), so that the
    MFU says so rather than nothing, or another device's. A trace with no device (no
    device plane, no device activity) takes no device's peaks: torch lists the machine's GPUs in ``deviceProperties`` of a
    CPU-only profile too (HTA's distributed_info_not_found: an A100's MFU of 2,467 CPU ops,
    beside the finding's advice for a CPU)."""
    why: tuple[str, str] | None = None
    if not _on_a_device(trace):  # host work alone: it ran on the host, whatever devices the machine had
        return None  # (Kineto's deviceProperties)
    for props in _distinct(device_properties(trace)):
        pk, reason = identify(props)
        if pk is not None:
            return _plane_peaks(trace, pk)
        if why is None and reason:
            why = (_name(props), reason)
    found = _plane_peaks(trace, None)
    if found is None and why is not None:
        return Peak(why[0], source=UNRECOGNISED + why[1])
    return found


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
