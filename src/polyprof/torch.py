"""``polyprof.torch.profile``: a drop-in for ``torch.profiler.profile`` that also runs a
polyprof session.

    with polyprof.torch.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler("log")) as prof:
        for batch in data:
            train_step(batch)
            prof.step()
    prof.trace          # the polyprof Trace
    prof.key_averages() # still torch's

It is a subclass of ``torch.profiler.profile``: same arguments, same methods
(``step``, ``export_chrome_trace``, ``key_averages``, ``events``...), the same
``on_trace_ready`` calls at the end of each active cycle. On top of that it runs one
polyprof session (host sections, steps, counters and every other default plugin)
for the whole ``with`` block, and ``.trace`` is that session's Trace after exit:
**one trace for the whole run**, holding torch's ops for every active cycle (each
cycle aligned to the session clock on its own; ``metadata["clock_sync"]["torch"]
["cycles"]`` describes each). ``step()`` also calls ``polyprof.step()``, so
polyprof's step N is torch's ``ProfilerStep#N``. With a ``schedule``, the trace's
``metadata["schedule"]`` names the steps torch recorded (``recorded_steps``, as a
``polyprof run --schedule`` session's), which the analyses keep to.

If a polyprof session is already active (e.g. the script runs under ``polyprof run``),
no second session is opened: the active session's torch plugin pauses its own
recording and takes this profiler's cycles instead, so they land in that session's
trace, and its ``metadata["schedule"]`` names the steps this profiler's schedule
recorded (the session's own schedule, if it has one, rules instead); ``.trace`` stays
None. Without a torch plugin there, this is torch's profiler.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.profiler
from torch.autograd.profiler_util import EventList

from .collect import recorder as rec_mod
from .collect.clock import now_ns
from .collect.registry import discover, resolve
from .collect.session import Session, active_session
from .errors import PluginError, PolyprofError
from .lowlevel import unseen
from .plugins.torch import TorchPlugin, active_plugin
from .plugins.torch.align import Capture
from .plugins.torch.captures import ExportDir
from .plugins.torch.handover import schedule_args
from .plugins.torch.ingest import SYNC_NAME
from .trace.core import Trace

log = logging.getLogger("polyprof")

__all__ = ["profile"]


class profile(torch.profiler.profile):
    """torch.profiler.profile plus a polyprof session (see the module docstring).

    Extra keyword arguments: ``plugins`` (other polyprof plugins to run, default: every
    available default plugin), ``output`` (write the polyprof trace there at exit),
    ``polyprof_options`` (per-plugin options, as ``polyprof.profile(options=)``).
    Everything else goes to ``torch.profiler.profile`` unchanged.
    """

    def __init__(self, *, activities: Iterable[torch.profiler.ProfilerActivity] | None = None,
                 schedule: Callable[[int], torch.profiler.ProfilerAction] | None = None,
                 on_trace_ready: Callable[[torch.profiler.profile], object] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: Any = None,  # torch's private _ExperimentalConfig
                 plugins: Sequence[str] | None = None, output: str | Path | None = None,
                 polyprof_options: dict[str, dict[str, object]] | None = None,
                 **torch_kwargs: Any) -> None:  # the rest of torch.profiler.profile's, passed on as given
        if plugins is not None:  # a typo in polyprof's own argument fails here, not silently later
            known = discover()
            unknown = [p for p in plugins if p not in known]
            if unknown:
                raise PluginError(f"no plugin named {', '.join(map(repr, unknown))}; "
                                  f"installed: {', '.join(sorted(known))}")
        self._pp_user_handler: Callable[[torch.profiler.profile], object] | None = None
        self._pp_plugins = plugins
        self._pp_output = output
        self._pp_options = dict(polyprof_options or {})
        self._pp_session: Session | None = None
        self._pp_plugin: TorchPlugin | None = None
        self._pp_capture: Capture | None = None
        self._pp_attached = False  # driving the torch plugin of an outer session
        self._pp_in_step = False  # inside step(): its transition calls polyprof.step()
        self._pp_files: list[str] = []  # our exports of each cycle (read at collect)
        self._pp_saved: tuple[object, str] | None = None  # (torch's cycle profiler, our export)
        #: the steps torch recorded (its schedule's active steps, by number) and their
        #: stretches [start, end] on the session clock (end -1 while open): a schedule's
        self._pp_scheduled = schedule is not None
        self._pp_recorded: list[int] = []
        self._pp_windows: list[list[int]] = []
        self._pp_export_dir = ExportDir()  # (the session's torch plugin holds it too, until it read the cycles)
        self._pp_dir = self._pp_export_dir.path
        #: the polyprof Trace of the whole run, set when the profiler stops
        self.trace: Trace | None = None
        super().__init__(activities=activities, schedule=schedule, on_trace_ready=on_trace_ready,
                         record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules,
                         experimental_config=experimental_config, **torch_kwargs)
        self._pp_rewire()

    # torch calls ``self.on_trace_ready(self)`` at the end of each cycle; the property
    # puts our export in front of the user's handler whichever way it was set.
    @property  # type: ignore[override]
    def on_trace_ready(self) -> Callable[[torch.profiler.profile], None]:
        return self._pp_trace_ready

    @on_trace_ready.setter
    def on_trace_ready(self, fn: Callable[[torch.profiler.profile], object] | None) -> None:
        self._pp_user_handler = fn

    def _pp_trace_ready(self, prof: torch.profiler.profile) -> None:
        plugin, cap = self._pp_plugin, self._pp_capture
        if plugin is not None and cap is not None:
            try:
                plugin.export(self, cap, self._pp_dir)
                if cap.path:
                    self._pp_saved = (self.profiler, cap.path)
                    self._pp_files.append(cap.path)
            except Exception as e:  # polyprof must not break torch's own flow
                log.warning("polyprof could not export torch's cycle: %s", e)
            self._pp_capture = None
        if self._pp_user_handler is not None:
            self._pp_user_handler(prof)

    def export_chrome_trace(self, path: str, use_python_export: bool = False) -> object:
        """As torch's. Kineto saves a cycle only once and polyprof saved it already,
        so a cycle polyprof exported is copied (gzipped for ``.gz``) from that file."""
        saved = self._pp_saved
        if saved is not None and saved[0] is self.profiler and os.path.exists(saved[1]):
            path = os.fspath(path)
            if path.endswith(".gz"):
                with open(saved[1], "rb") as fin, gzip.open(path, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:
                shutil.copyfile(saved[1], path)
            return None
        return super().export_chrome_trace(path, use_python_export=use_python_export)

    # ------------------------------------------------------------------ lifecycle
    # polyprof's own work runs unseen by the program's profile function (torch's
    # ``with_stack`` tracer: docs/torch.md), torch's own methods in sight: the frames and
    # calls torch records are those of torch.profiler.profile alone. ``start`` opens the
    # session before torch starts (and closes it if torch's start raises); each cycle's
    # clock markers are actions of torch's own schedule table (_pp_rewire); ``stop``
    # closes the session after torch's stop, from that table too.
    def _pp_stepping(self) -> None:
        self._pp_in_step = True

    def _pp_step_failed(self) -> None:
        self._pp_in_step = False

    def _pp_nothing(self) -> None:
        pass

    start = unseen.quiet(lambda self: self._pp_open(), torch.profiler.profile.start,
                         lambda self: self._pp_close_session())
    stop = unseen.quiet(_pp_nothing, torch.profiler.profile.stop, lambda self: self._pp_close_session())
    #: torch's step; polyprof.step() is the first action of its transition (_pp_rewire):
    #: torch's ``ProfilerStep#N`` has ended then, so it nests inside polyprof's step N
    step = unseen.quiet(_pp_stepping, torch.profiler.profile.step, _pp_step_failed)

    def _pp_rewire(self) -> None:
        """torch's table of actions per schedule transition, with polyprof's unseen:
        ``polyprof.step()`` first in a transition made by ``step``, clock markers after
        each ``start_trace`` and before each ``stop_trace``, the session's close after
        every transition to the end."""
        after_start = unseen.quiet(self._pp_cycle_started)
        before_stop = unseen.quiet(self._pp_cycle_ending)
        close = unseen.quiet(self._pp_close_session)
        stepped = unseen.quiet(self._pp_stepped)
        noted = unseen.quiet(self._pp_note_step)
        table = self.action_map
        kinds = list(torch.profiler.ProfilerAction)
        for prev in kinds:
            for cur in [*kinds, None]:
                table.setdefault((prev, cur), [])
        for key, actions in list(table.items()):
            new: list[Callable[[], object]] = [] if key[1] is None else [stepped, noted]
            for a in actions:
                if a == self.start_trace:
                    new += [a, after_start]
                elif a == self.stop_trace:
                    new += [before_stop, a]
                else:
                    new.append(a)
            if key[1] is None:
                new.append(close)
            table[key] = new

    def _pp_stepped(self) -> None:
        if self._pp_in_step:
            self._pp_in_step = False
            rec_mod.step()

    def _pp_note_step(self) -> None:
        """After torch entered step ``step_num`` (its action already set): note it when
        torch records it (RECORD, RECORD_AND_SAVE), and the recorded stretches' times."""
        active = getattr(self.current_action, "name", None) in ("RECORD", "RECORD_AND_SAVE")
        w = self._pp_windows
        if active and self.step_num not in self._pp_recorded:
            self._pp_recorded.append(int(self.step_num))
            if not w or w[-1][1] >= 0:
                w.append([now_ns(), -1])
        elif not active and w and w[-1][1] < 0:
            w[-1][1] = now_ns()

    def polyprof_schedule(self) -> dict[str, Any] | None:
        """What the session's trace says of this profiler's schedule (``metadata["schedule"]``,
        as ``collect/schedule.Driver.summary``): a ``torch.profiler.schedule``'s arguments,
        the steps torch recorded (``recorded_steps``) and their stretches (``windows_ns``);
        None without a schedule (torch records every step)."""
        if not self._pp_scheduled:
            return None
        args = schedule_args(self.schedule) or {}
        return {**args, "by": "torch.profiler", "recorded_steps": list(self._pp_recorded),
                "windows_ns": [list(w) for w in self._pp_windows]}

    def _pp_done(self, plugin: TorchPlugin) -> None:
        """The drop-in ends: the torch plugin it drove (its own session's, or the active
        session's) keeps the steps torch recorded for it, for ``metadata["schedule"]``
        (plugins/torch/handover.py, ``DropIns``). The last stretch ends here."""
        if self._pp_windows and self._pp_windows[-1][1] < 0:
            self._pp_windows[-1][1] = now_ns()
        plugin.dropins.done(self.polyprof_schedule(), self._pp_recorded, self._pp_windows, self._pp_export_dir)

    def _pp_cycle_started(self) -> None:
        plugin = self._pp_plugin
        if plugin is not None:
            self._pp_capture = plugin.new_capture()
            plugin.sync(self._pp_capture)

    def _pp_cycle_ending(self) -> None:
        plugin, cap = self._pp_plugin, self._pp_capture
        if plugin is not None and cap is not None:
            plugin.sync(cap)

    # ------------------------------------------------------------------ torch's tables
    def events(self) -> EventList:
        self._pp_drop_markers()
        return super().events()

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> EventList:
        self._pp_drop_markers()
        return super().key_averages(group_by_input_shape, group_by_stack_n, group_by_overload_name)

    def _pp_drop_markers(self) -> None:
        """torch's events of the cycle without polyprof's clock-sync markers (torch's
        JSON keeps them: the polyprof trace is aligned by them). Done once per cycle,
        when a table is first asked for (torch builds its events lazily too)."""
        p = self.profiler
        if p is None:
            return
        try:
            evs = p.function_events
        except Exception:  # e.g. trace_only: torch's own call raises its own error
            return
        if evs is None or getattr(evs, "_pp_markers_dropped", False):
            return
        drop = [e for e in evs if e.name == SYNC_NAME]
        for e in drop:
            parent = e.cpu_parent
            if parent is not None and e in parent.cpu_children:
                parent.cpu_children.remove(e)
        if drop:
            evs[:] = [e for e in evs if e.name != SYNC_NAME]
        evs._pp_markers_dropped = True  # torch's EventList (a list with a __dict__), new each cycle

    # ------------------------------------------------------------------ the session
    def _pp_open(self) -> None:
        if self._pp_session is not None or self._pp_attached:
            return
        outer = active_session()
        if outer is not None:
            # e.g. under `polyprof run`: hand torch's cycles to that session's torch plugin
            plugin = active_plugin()
            if plugin is not None and plugin.attach_driver(self):
                self._pp_plugin, self._pp_attached = plugin, True
                return
            log.warning("polyprof.torch.profile inside a polyprof session without the torch "
                        "plugin: profiling with torch only (.trace stays None)")
            return
        try:
            if self._pp_plugins is None:
                # torch.profiler records CUDA itself: the cupti plugin stays out (CUPTI takes one recorder)
                skip = {"torch", "cupti"} if getattr(torch.profiler.ProfilerActivity, "CUDA", None) in set(
                    getattr(self, "activities", None) or ()) else {"torch"}
                names = [p.name for p in resolve(None) if p.name not in skip]
            else:
                names = [p for p in self._pp_plugins if p != "torch"]
            plugin = TorchPlugin(driver=self, **self._pp_options.get("torch", {}))
            session = Session([*names, plugin], output=self._pp_output, options=self._pp_options,
                              memory=bool(self.profile_memory))  # profile_memory: every plugin's memory
            session.start()
        except PolyprofError as e:
            log.warning("polyprof session not started: %s", e)
            return
        self._pp_session, self._pp_plugin = session, plugin

    def _pp_close_session(self) -> None:
        if self._pp_attached:
            plugin, self._pp_plugin, self._pp_attached = self._pp_plugin, None, False
            self._pp_capture = None
            if plugin is not None:
                self._pp_done(plugin)
                plugin.detach_driver(self)
            return
        session, self._pp_session = self._pp_session, None
        if session is None:
            return
        if self._pp_plugin is not None:
            self._pp_done(self._pp_plugin)
        try:
            self.trace = session.stop()
        finally:
            self._pp_plugin = None
            self._pp_capture = None
            # read by now; only the last cycle's file is still handed out by export_chrome_trace
            for path in self._pp_files[:-1]:
                try:
                    os.remove(path)
                except OSError:
                    pass
            del self._pp_files[:-1]

    @property
    def session(self) -> Session | None:
        """The polyprof session while the profiler runs."""
        return self._pp_session
