"""Device peaks matched by the whole words of a device's name, the most specific entry
winning; no peaks (and the MFU line saying why) for a name no entry fits or that fits
two alike; a MIG slice held to its share of the GPU (audF F1, F2, F6).

The traces are the real H200 bf16 products (tests/data/h200/torch_bf16_mm_h200.json.gz:
40 products of 8192³, 709 TFLOP/s over the steps), copied with only the device's name
and SM count changed, as a run on another GPU would describe itself."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import polyprof
from polyprof.analyze import peaks
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.report.efficiency_text import mfu_line
from polyprof.report.roofline_view import roofline_view

H200_MM = Path(__file__).parent / "data" / "h200" / "torch_bf16_mm_h200.json.gz"


@pytest.mark.parametrize("name, model", [
    # before: an L4 (the L4's words were a substring of "nvidia l40s"), H100/H200 SXM, MI300X, "H200 SXM"
    ("NVIDIA L40S", "NVIDIA L40S"), ("NVIDIA L40", "NVIDIA L40"), ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"), ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3"), ("NVIDIA GH200 144G HBM3e", "NVIDIA GH200 144GB HBM3e"),
    ("AMD Instinct MI300A", "AMD Instinct MI300A"), ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("AMD Instinct MI325X", "AMD Instinct MI325X"),
    # JAX's device kinds (jax/_src/pallas/mosaic/tpu_info.py): "TPU7x" was read as a v6e
    ("TPU7x", "Google TPU7x"), ("TPU v5", "Google TPU v5p"), ("TPU v5 lite", "Google TPU v5e"),
    ("TPU v4 lite", "Google TPU v4i"), ("TPU v4", "Google TPU v4"),
    ("Intel(R) Data Center GPU Max 1100", "Intel Data Center GPU Max 1100"),
    ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "NVIDIA A100 80GB SXM"),
])
def test_names_match_their_own_entry(name, model):
    assert peaks.match(name).model == model


def test_new_entries_carry_their_datasheets_dense_figures():
    assert peaks.match("NVIDIA L40S").flops("bf16") == 362.05e12 and peaks.match("NVIDIA L40S").bandwidth == 864e9
    assert peaks.match("NVIDIA L40").flops("bf16") == 181.05e12 and peaks.match("NVIDIA L40").flops("fp32") == 90.5e12
    nvl = peaks.match("NVIDIA H100 NVL")
    assert nvl.flops("bf16") == 835.5e12 and nvl.bandwidth == 3.9e12
    mi300a = peaks.match("AMD Instinct MI300A")
    assert (mi300a.units, mi300a.flops("bf16"), mi300a.flops("fp32")) == (228, 980.6e12, 122.6e12)


def test_unknown_or_ambiguous_names_get_no_peaks_and_a_reason():
    assert peaks.match("NVIDIA GB200") is None  # (before: a B200, its words a substring)
    assert peaks.identify({"name": "NVIDIA GB200", "numSms": 148})[1] == "no entry of analyze/peaks.json names it"
    # "MI300" fits the MI300X and the MI300A alike: their CU counts tell them apart, or nothing does
    assert peaks.match("AMD Instinct MI300") is None
    assert peaks.match_properties({"name": "AMD Instinct MI300", "numSms": 228}).model == "AMD Instinct MI300A"
    pk, why = peaks.identify({"name": "AMD Instinct MI300", "numSms": 38})  # a CPX partition of either
    assert pk is None and "fits AMD Instinct MI300A and AMD Instinct MI300X alike" in why
    # ROCm's "MI250X / MI250": each die's CUs say which
    assert peaks.match_properties({"name": "AMD Instinct MI250X / MI250", "numSms": 104}).model == "AMD Instinct MI250"
    # more SMs than the entry its name matches: another device, not the entry's peaks
    pk, why = peaks.identify({"name": "NVIDIA L4", "numSms": 142})
    assert pk is None and "more than the 58" in why


def test_mig_slices_get_their_share():
    """A MIG slice reports its own SMs (cudaGetDeviceProperties): its compute peak is that
    share, its bandwidth its memory slices' (before: the whole GPU's, MFU 7.7x too low)."""
    one = peaks.match_properties({"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "numSms": 14})
    assert one.flops("bf16") == pytest.approx(312e12 * 14 / 108) and one.bandwidth == pytest.approx(1.555e12 / 8)
    three = peaks.match_properties({"name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "numSms": 60})
    assert three.flops("bf16") == pytest.approx(989.4e12 * 60 / 132) and three.bandwidth == pytest.approx(3.35e12 / 2)
    assert "a MIG slice, 60 of its 132 SMs" in three.source
    # not MIG: a share of SMs is a share of every rate (one of an MI250X's two dies, as before)
    die = peaks.match_properties({"name": "AMD Instinct MI250X", "numSms": 110})
    assert die.flops("bf16") == 383e12 / 2 and die.bandwidth == 3.2768e12 / 2


def _renamed(tmp_path: Path, name: str, sms: int) -> Path:
    d = json.loads(gzip.open(H200_MM).read())
    for p in d["deviceProperties"]:
        p["name"], p["numSms"] = name, sms
    out = tmp_path / f"{sms}.json"
    out.write_text(json.dumps(d))
    return out


def _line(trace, peak: str | None = None) -> str:
    """The summary's MFU line of the whole trace."""
    return mfu_line(SimpleNamespace(tables={"mfu": mfu(trace, peak=peak)}, trace=trace)).plain


def test_mfu_of_renamed_devices(tmp_path):
    mig = polyprof.load(_renamed(tmp_path, "NVIDIA H200 MIG 1g.18gb", 16))
    m = mfu(mig)
    assert column(m, "peak_flops_per_s")[0] == pytest.approx(989.4e12 * 16 / 132)
    assert "a MIG slice, 16 of its 132 SMs" in column(m, "device")[0]
    # past 100% (an H200's rate held to an L40S's peak): said, not printed without a word
    line = _line(polyprof.load(_renamed(tmp_path, "NVIDIA L40S", 142)))
    assert line.startswith("MFU 191% (bf16)") and "past 100%: the peaks (NVIDIA L40S's) or the FLOPs" in line
    # a device in no entry: no MFU, and why (before: an MI300X's or a B200's peaks)
    line = _line(polyprof.load(_renamed(tmp_path, "NVIDIA GB200", 148)))
    assert line.startswith("MFU unknown (bf16): 55 TFLOP in 79.3 ms, 693 TFLOP/s;")
    assert "no bf16 peak known for NVIDIA GB200 (no entry of analyze/peaks.json names it)" in line
    gb200 = polyprof.load(_renamed(tmp_path, "NVIDIA GB200", 148))
    note = roofline_view(SimpleNamespace(tables={"op_efficiency": op_efficiency(gb200)}, trace=gb200))["note"]
    assert note == ("no device peaks known for NVIDIA GB200 (no entry of analyze/peaks.json names it): points only "
                    "(--peak gives them)")
    line = _line(polyprof.load(_renamed(tmp_path, "AMD Instinct MI300", 38)))
    assert "for AMD Instinct MI300 (its name fits AMD Instinct MI300A and AMD Instinct MI300X alike" in line


def test_mfu_line_with_peaks_of_another_precision_only():
    """``--peak fp32=...`` on a bf16 run of a device not recognised: before, "no bf16 peak
    known for given by hand"."""
    t = polyprof.load(Path(__file__).parent / "data" / "traces" / "autocast_cpu" / "autocast_cpu.json.gz")
    line = _line(t, "fp32=1e11")
    assert "MFU unknown (bf16)" in line and "no bf16 peak known (--peak gave fp32 only): give one with --peak bf16=" \
        in line
    assert _line(t, "bf16=1e12").startswith("MFU 0.153% (bf16): 12.5 MFLOP in")
