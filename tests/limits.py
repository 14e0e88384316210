"""A ``polyprof`` command run under a resource limit, set by the child itself.

``subprocess.run(preexec_fn=...)`` forks the test process and runs Python between the
fork and the exec; once an earlier test has started threads (gRPC's event engine in the
serve tests) that child can abort (CI: ``Epoll1Poller ... epoll_wait error``, SIGABRT)
before polyprof ever runs. Here the new interpreter sets the limit on itself, then runs
``python -m polyprof`` as a user's ``ulimit`` would leave it."""

from __future__ import annotations

import sys

_TRAMPOLINE = ("import resource, runpy, sys\n"
               "for name, n in ((n.split('=')[0], int(n.split('=')[1])) for n in sys.argv[1].split(',') if n):\n"
               "    resource.setrlimit(getattr(resource, name), (n, n))\n"
               "sys.argv = ['polyprof', *sys.argv[2:]]\n"
               "runpy.run_module('polyprof', run_name='__main__', alter_sys=True)\n")


def polyprof_limited(*args: str, address_space: int | None = None, file_size: int | None = None) -> list[str]:
    """The command line of ``python -m polyprof ARGS`` under RLIMIT_AS / RLIMIT_FSIZE (bytes)."""
    limits = ",".join(f"{name}={n}" for name, n in (("RLIMIT_AS", address_space), ("RLIMIT_FSIZE", file_size))
                      if n is not None)
    return [sys.executable, "-c", _TRAMPOLINE, limits, *args]
