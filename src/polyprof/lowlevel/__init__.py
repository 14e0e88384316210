"""Speed tricks that act on the interpreter itself, in one place, each kept because it
pays on real use (figures: docs/benchmarks.md, "Interpreter tricks").

* :func:`heap.collector_paused` — the cyclic garbage collector off while a reader
  makes millions of short-lived objects that form no cycles (decoded JSON of Kineto
  files and their args): otherwise each collection re-scans them.
* :func:`heap.quiet_start` — ``polyprof run``'s start with the collector off, NumPy
  imported first; :func:`heap.freeze_before_program` moves what polyprof made out of
  the collector's sight just before the profiled program starts and turns the
  collector back on (the pattern the ``gc`` module documents for fork servers:
  disable early, freeze, enable), so the program's own collections and the
  interpreter's exit do not walk polyprof's objects.
* :func:`heap.pause_for_command` — a summary, report or diff runs with the collector
  off (it is turned back on when ``cli.main`` returns): everything such a command makes
  it keeps to its end, without reference cycles, and the collections at its start
  (about 50 in a summary of a small XSpace) cost it about a tenth of its CPU time
  (docs/benchmarks.md, issue 35).
* :func:`heap.freeze_for_exit` — a read-only command done: the interpreter's
  shutdown need not walk the analysed heap.
* :func:`exit.quick_exit` — after a command whose every output is closed (a summary,
  a report), the exit handlers run and the process ends without the interpreter's
  teardown, which frees every object of the analysed heap one by one.

* :func:`heap.reusing_freed_pages` — a big Kineto load's large NumPy arrays (8 MB and
  more) made from the pages of those it freed, moved into place by ``mremap``, instead of
  fresh memory the kernel faults in and zeroes (``_heapcache.c``, a NumPy data-memory
  handler installed only around the reader's call, in its thread, and put back after;
  what it keeps is unmapped at each :func:`heap.trim` and at the end). At 50M events the
  kernel's share of the load was half its growth per event (docs/benchmarks.md, "Linear
  growth to 50M trace events"). :func:`heap.for_command` installs it around a read-only
  command's whole work as well (``summary``, ``report``, ...: cli/__init__.py), so the
  analyses' big columns and temporaries reuse freed pages too: a 20M-event summary's
  system time fell from 26 s to 4 s (docs/benchmarks.md, "Whole-process scale"). Not in
  a profiled program's own allocations.

* :func:`heap.prepare_heap` — at the start of a read-only command (cli/__init__.py), which
  owns its process; never in a reader, whose process may be a library user's or a profiled
  program's (plugins/jax.py reads its XSpace at a session's stop). One block made and
  freed untouched raises glibc's mmap threshold (and trim threshold) as a program's first
  large free does, and 16 MiB of heap is marked for transparent huge pages and freed for
  reuse (what glibc's ``glibc.malloc.hugetlb=1`` tunable does from a process's start):
  a small trace's column-sized arrays come from the heap and reuse its pages, each 2 MiB
  of it faulted in once, instead of each array being mapped, faulted in 4 KiB at a time
  and unmapped (docs/benchmarks.md, "Eleventh session"). Peak memory +1-2 MB.

* :func:`blas.import_numpy_single_threaded` — a read-only command (a summary, a report)
  imports NumPy with OpenBLAS at one thread. OpenBLAS starts a pool of one thread per
  core when NumPy loads it; polyprof's analyses do no linear algebra, so the pool only
  costs the start of every such process CPU time (docs/benchmarks.md, issue 35). The
  environment is put back once NumPy is loaded; a value the user set is kept.

* :func:`fork.in_child` — what a forked child does with what it copied: a session
  there records nothing and never touches the parent's files (DataLoader workers,
  multiprocessing pools), a capture server forgets the parent's server. Not for speed:
  so that a fork never corrupts the parent's trace.

* :mod:`unseen` — not for speed either: polyprof's background threads, its hooks on the
  program's thread and ``polyprof run``'s launcher kept out of the program's own
  profilers (``torch.profiler`` with ``with_stack=True``, cProfile; docs/torch.md).

What a program profiled by ``polyprof run`` sees of these: the frozen objects are not
in ``gc.get_objects()`` and ``gc.get_freeze_count()`` is not 0 (docs/architecture.md).
Nothing here is a benchmark-only path: each trick runs on every ``polyprof`` command of
its kind. The compiled fast paths (``_fastsection``, ``_gather``, ``_args``, ``_wire``,
``_profinfo``, ``_longest``, ``_heapcache``) sit next to the Python they replace, each with its pure-Python twin
(``POLYPROF_PURE_PYTHON=1``).
"""
