"""The PyTorch plugin (``polyprof.plugins.torch:TorchPlugin``), by job:

* ``plugin``: the session lifecycle (start lazily at ``import torch``, mirror sections
  and steps into torch, stop, hand-over to ``polyprof.torch.profile``);
* ``hooks``: what it needs of torch (is it imported, its cheapest range calls, the
  import hook);
* ``align``: Kineto's clock onto the session clock (trace/clock.py);
* ``ingest``: one Kineto recording re-homed into the session trace;
* ``memory``: torch's memory events kept inside their sections, with torch's categories.

Every session's plugin discovery imports this package: ``ingest`` (and the clock
service) are imported on first use, once torch recorded something.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_names
from .align import Capture, fit_alignment, fit_pairs
from .hooks import default_activities, recording_survived
from .plugin import TorchPlugin, active_plugin

if TYPE_CHECKING:
    from .ingest import STEP_PREFIX, SYNC_NAME, ingest_kineto

_Capture = Capture  # the name tests and older callers use


__getattr__ = lazy_names(__name__, dict.fromkeys(("STEP_PREFIX", "SYNC_NAME", "ingest_kineto"), "ingest"))


__all__ = ["STEP_PREFIX", "SYNC_NAME", "Capture", "TorchPlugin", "active_plugin", "default_activities",
           "fit_alignment", "fit_pairs", "ingest_kineto", "recording_survived"]
