"""Queues: the factory that makes them profile, what their ``properties`` report, and
a queue read once so that a closed one is never touched again.

``QueueFactory`` stands in for ``pyopencl.CommandQueue`` during a session (for the rest
of the process under a capture server, early.py): pyopencl's queues are nanobind objects
whose properties are fixed at creation, and nanobind calls the constructor it was built
with (assigning ``CommandQueue.__init__`` changes only subclasses), so the class name in
the ``pyopencl`` namespace is what can be replaced.
"""

from __future__ import annotations

from typing import NamedTuple, SupportsInt


class QueueRef(NamedTuple):
    """A queue as read once, at stop or as the program closed it (``with CommandQueue()``
    or ``_finalize``): stop and collect never touch a closed queue, which pyopencl
    answers with a ``CommandQueueUsedAfterExit`` warning in the program's stderr."""

    queue: object
    int_ptr: int
    device: object
    context: object
    properties: int
    closed: bool


def read_queue(q: object, closed: bool = False) -> QueueRef | None:
    """``q``'s handle, device, context and properties (None if it cannot be read)."""
    try:
        return QueueRef(q, int(q.int_ptr), q.device, q.context,  # type: ignore[attr-defined]
                        _properties_of(q), closed)
    except Exception:
        return None


def _properties_of(q: object) -> int:
    """The queue's real properties (``properties`` reports what the program asked for
    while a factory is in place: ReportedProperties)."""
    getter = _real_properties
    value = getter.__get__(q) if getter is not None else q.properties  # type: ignore[attr-defined]
    if not isinstance(value, SupportsInt):
        raise TypeError(f"queue properties {value!r}")
    return int(value)


_real_properties: property | None = None  # pyopencl's own CommandQueue.properties


class QueueFactory:
    """Stands in for ``pyopencl.CommandQueue`` during a session: calling it makes a real
    ``CommandQueue`` with PROFILING_ENABLE added to its properties (the others
    unchanged); ``isinstance``, subclassing and class attributes behave as the real class,
    and ``queue.properties`` reports what the program asked for (``reported_properties``)."""

    def __init__(self, base: type, profiling_flag: int):
        self._base = base
        self._flag = profiling_flag
        self._sub: type | None = None
        self.created = 0
        self.forced = 0
        self.forced_ptrs: set[int] = set()  # the handles of the queues it made profile
        self.kept = False  # stays in place when the session that made it ends (early.py)
        _look_like(self, base)

    def permanent(self) -> QueueFactory:
        """Keep this factory in place after the session that installed it."""
        self.kept = True
        return self

    def _props(self, properties: object) -> tuple[object, bool]:
        """(the properties to create the queue with, whether PROFILING_ENABLE was added)."""
        if properties is None:
            properties = 0
        if not isinstance(properties, SupportsInt):
            return properties, False  # a property list: leave it as the user wrote it
        value = int(properties)
        if not value & int(self._flag):
            self.forced += 1
            return value | int(self._flag), True
        return properties, False

    def _made(self, queue: object, forced: bool) -> None:
        try:
            ptr = int(queue.int_ptr)  # type: ignore[attr-defined]
        except Exception:
            return
        if forced:
            self.forced_ptrs.add(ptr)
        else:  # a handle used again by a queue that asked for profiling itself
            self.forced_ptrs.discard(ptr)

    def __call__(self, context: object, device: object = None, properties: object = 0, *args: object, **kwargs: object) -> object:
        self.created += 1
        props, forced = self._props(properties)
        queue = self._base(context, device, props, *args, **kwargs)
        self._made(queue, forced)
        return queue

    def reported_properties(self) -> ReportedProperties | None:
        """The ``properties`` attribute to put on the real class while this factory is
        in place (None where pyopencl's is not a property of that class)."""
        real = self._base.__dict__.get("properties")
        if isinstance(real, ReportedProperties):
            real = real.real
        if not isinstance(real, property):
            return None
        global _real_properties
        _real_properties = real
        return ReportedProperties(self, real)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, self._base)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, self._base)

    def __mro_entries__(self, bases: tuple) -> tuple:
        """``class MyQueue(cl.CommandQueue)`` gets a base that also adds profiling."""
        if self._sub is None:
            factory, base = self, self._base

            class ProfilingCommandQueue(base):  # type: ignore[misc, valid-type]
                def __init__(self, context: object, device: object = None, properties: object = 0,
                             *args: object, **kwargs: object) -> None:
                    props, forced = factory._props(properties)
                    super().__init__(context, device, props, *args, **kwargs)
                    factory._made(self, forced)

            _look_like(ProfilingCommandQueue, base)
            self._sub = ProfilingCommandQueue
        return (self._sub,)

    def __getattr__(self, name: str) -> object:
        return getattr(self._base, name)

    def __or__(self, other: object) -> object:  # ``cl.CommandQueue | None`` in annotations
        return self._base | other

    def __ror__(self, other: object) -> object:
        return other | self._base

    def __repr__(self) -> str:
        return f"<polyprof profiling factory for {self._base!r}>"


def _look_like(obj: object, base: type) -> None:
    """What introspection reads off a class (``__module__``, ``__name__``...): pyopencl's."""
    for attr in ("__module__", "__qualname__", "__name__", "__doc__"):
        try:
            setattr(obj, attr, getattr(base, attr))
        except (AttributeError, TypeError):
            pass


class ReportedProperties(property):
    """``CommandQueue.properties`` while a factory is in place: what the program asked
    for, PROFILING_ENABLE left out of the queues the factory added it to (their real
    properties: ``get_info(command_queue_info.PROPERTIES)``)."""

    def __init__(self, factory: QueueFactory, real: property):
        flag, forced = int(factory._flag), factory.forced_ptrs

        def properties(queue: object) -> object:
            value = real.__get__(queue)
            if forced and isinstance(value, int) and value & flag:
                try:
                    if int(queue.int_ptr) in forced:  # type: ignore[attr-defined]
                        return value & ~flag
                except Exception:
                    pass
            return value

        super().__init__(properties, doc=real.__doc__)
        self.factory, self.real = factory, real
