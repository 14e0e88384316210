"""The memory pre-check of the commands that read a whole trace (ranks/fits.py): a
Kineto / Chrome JSON file or a store's rank, said in one line before it is read where
it would not fit. Other formats are not checked (and the check's module not imported:
an XSpace's summary never loads it, tests/test_import_weight.py)."""

from __future__ import annotations

from pathlib import Path


def is_json_trace(path: str) -> bool:
    """A Kineto / Chrome JSON file (the formats the check estimates)."""
    if not Path(path).is_file():
        return False
    from ..formats.detect import detect  # only for a file: a store or directory needs no sniffing

    return detect(path) in ("kineto", "chrome-json")


def check_memory(command: str, files: list[str], windows: bool = False, rank: int | None = None) -> None:
    """One line, before reading, where ``command`` (``summary``, ``summary-json``,
    ``report``, ``export``) would not fit: a JSON file given alone, or each rank of a store
    not summarised window by window (with ``windows``: ``summary``'s default steps,
    ranks/stepwise.py); ``rank``: only that rank of a store."""
    from .ranks import is_store

    if len(files) == 1 and is_store(files[0]):
        from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound
        from ..store.manifest import read_manifest

        root = Path(files[0])
        for r in read_manifest(root)["ranks"]:
            if rank is not None and r["rank"] != rank:
                continue
            events = int(r.get("events", 0))
            p = None
            if windows and fits.store_rank_bytes(events) > fits.memory_bound():
                from ..ranks.stepwise import by_windows, check_plan  # the windows: only for a rank above the bound

                p = by_windows(root / r["path"], events)
                if p is not None:
                    check_plan(p, f"{root}: rank {r['rank']}")
            if p is None:
                fits.check_store_rank(root, r["rank"], events, command)
    elif len(files) == 1 and is_json_trace(files[0]):
        from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound

        fits.check_file(files[0], command)


def check_diff(paths: list[str]) -> None:
    """``diff``'s inputs: its JSON files' texts and its stores' events, each side's runs
    summed (docs/reliability.md: diff's peak grows with all its inputs)."""
    from .ranks import is_store

    json_files = [Path(p) for p in paths if is_json_trace(p)]
    stores = [Path(p) for p in paths if is_store(p)]
    if not json_files and not stores:
        return
    from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound
    from ..store.manifest import read_manifest

    text = sum(fits.json_text_bytes(p) for p in json_files)
    events = sum(int(r.get("events", 0)) for s in stores for r in read_manifest(s)["ranks"])
    need = fits.json_need(text, "diff") + fits.STORE_FACTORS["diff"] * events
    fits.check_fits(f"{', '.join(map(str, json_files + stores))} (polyprof diff)", need,
                    "compare fewer runs at once, convert a JSON trace to a store (polyprof convert), or compare "
                    "on a machine with more memory")
