"""Writing a store: the folder's protocol, so that a store with a manifest is complete and
a conversion that fails leaves what was at ``-o`` as it was.

The new store is built in a hidden sibling of its path, ``.NAME.polyprof-new`` (the same
filesystem, so it can be renamed): each rank is written (``rankfiles.write_rank``) into a
``.part-N`` folder there; when every rank is written, :func:`finish` renames them to
``rank=R``, writes the manifest last (to a temporary name, then renamed) and swaps the
new store in: the old one (with ``--overwrite``) is renamed aside to
``.NAME.polyprof-old``, the new one renamed to NAME, then the old one removed. Until
that swap nothing at NAME is touched; a failure anywhere before it removes the new
store and no more. Which traces are written, and where the work runs, is the job's
business (``polyprof.ranks``: ``TraceSet.convert``).

One conversion per store at a time: :func:`prepare` takes an exclusive ``flock`` on
``.NAME.polyprof-lock`` beside NAME (refusing, with an OutputError saying so, where
another process holds it) before it looks at NAME or clears a leftover, and
:func:`finish` or :func:`discard_parts` gives it back and removes the file. A killed
conversion's lock goes with its process, so its leftover is cleared by the next.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from .. import outfile
from ..errors import OutputError, PolyprofError
from .manifest import MANIFEST, RANK_PREFIX, rank_dir, write_manifest
from .rankfiles import NEW, PART, writing

log = logging.getLogger("polyprof")

#: what a leftover of this protocol may hold (a conversion killed part-way)
_OURS = (PART, RANK_PREFIX, MANIFEST)
#: the locks this process holds: a store's real path -> the locked descriptor of its lock file
_HELD: dict[Path, int] = {}


def _real(root: Path) -> Path:
    """``root`` with its symlinks resolved: a store reached through a link is replaced
    where it lies, and the link kept."""
    return Path(os.path.realpath(root))


def staging(root: Path) -> Path:
    """Where the new store for ``root`` is built before it is swapped in."""
    real = _real(root)
    return real.parent / f".{real.name}{NEW}"


def refuse_unfinished(root: Path) -> None:
    """Refuse a store that is not there yet because a convert is building it (or one was
    killed building it): its :func:`staging` folder is there, not ``root``."""
    new = staging(root)
    if not os.path.lexists(root) and new.is_dir():
        raise PolyprofError(f"{root}: no store here yet: a convert is writing it in {new} (or was killed while "
                            f"writing it); the store appears at {root} when its convert ends")


def _aside(root: Path) -> Path:
    real = _real(root)
    return real.parent / f".{real.name}.polyprof-old"


def check_inputs(root: Path, inputs: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse an input that is the store ``root`` or lies inside it: the conversion would
    read the store it replaces."""
    real = _real(root)
    for i in inputs:
        p = _real(Path(i))
        if p == real or real in p.parents:
            where = "is the output" if p == real else f"is inside the output {root}"
            raise PolyprofError(f"{i}: the input {where} (-o): convert cannot read the store it replaces; "
                                "write the new store to another -o")


def prepare(root: Path, overwrite: bool) -> None:
    """Make ready for a new store at ``root``: take its lock (another convert writing it
    is refused), refuse a non-empty directory that is not a store, and a store unless
    ``overwrite``; make the (empty) folder the new store is built in. ``root`` itself is
    not touched. The lock is held until :func:`finish` or :func:`discard_parts`."""
    if root.is_symlink() and not root.exists():
        raise OutputError(f"{root}: is a symlink to nothing; remove it or choose another -o")
    if root.exists() and not root.is_dir():
        raise OutputError(f"{root}: exists and is not a directory")
    if not _real(root).name:
        raise OutputError(f"{root}: is no path a store can be written to; choose another -o")
    _lock(root)
    try:
        _prepare(root, overwrite)
    except BaseException:
        _unlock(root)
        raise


def _prepare(root: Path, overwrite: bool) -> None:
    if root.exists() and any(root.iterdir()):
        ours = (root / MANIFEST).exists() or any(root.glob("rank=*")) or any(root.glob(".part-*"))
        if not ours:
            raise OutputError(f"{root}: exists and is not empty (and not a store); choose another -o")
        if not overwrite:
            raise OutputError(f"{root}: a store is already there; pass --overwrite to replace it")
    real = _real(root)
    here = Path(os.path.realpath(os.curdir))
    if real.exists() and (here == real or real in here.parents):
        raise OutputError(f"{root}: holds the current directory, and the new store is renamed over it "
                          "(a shell there would be left in a removed folder); run convert from outside it")
    new = staging(root)
    _remove_leftover(new)
    try:
        new.mkdir(parents=True)
    except OSError as e:
        raise OutputError(f"{root}: the new store cannot be made beside it ({new}: {e.strerror or e})") from None


def _remove_leftover(path: Path) -> None:
    """Remove what a killed conversion left at ``path`` (the new store being built, or the
    old one set aside after the new one was in): refused if it holds anything else."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir() or not all(p.name.startswith(_OURS) for p in path.iterdir()):
        raise OutputError(f"{path}: is in the way of polyprof convert (its work folder) and is not one it left; "
                          "remove it or choose another -o")
    shutil.rmtree(path)


def lock_path(root: Path) -> Path:
    """The file whose ``flock`` a conversion to ``root`` holds (``outfile.lock_path`` of
    its real path: the name a run's save locks too)."""
    return outfile.lock_path(_real(root))


def _lock(root: Path) -> None:
    """Take the lock of ``root`` for this process, without waiting: an OutputError where
    another process holds it. A file system without locks is written unlocked, as
    before locks were taken, and said."""
    path = lock_path(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _HELD[_real(root)] = outfile.take_lock(path)
    except BlockingIOError as e:
        raise OutputError(f"{root}: another polyprof convert{_pid(e)} is writing this store (it holds "
                          f"{path}); wait for it to end, or choose another -o") from None
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            raise OutputError(f"{root}: the new store cannot be made beside it ({path}: {e.strerror or e})") \
                from None
        log.warning("%s: written without its lock (%s: %s): another convert to it at the same time is not "
                    "refused", root, path, e.strerror or e)


#: what flock answers on a file system that has no locks
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def _pid(e: BlockingIOError) -> str:
    """`` (pid N)`` of the holder ``outfile.take_lock`` named, where it did."""
    text = str(e.strerror or "")
    return text[text.index(" (pid"):text.index(")") + 1] if " (pid" in text else ""


def _unlock(root: Path) -> None:
    """Give back this process's lock of ``root`` and remove its file (``outfile.drop_lock``)."""
    fd = _HELD.pop(_real(root), None)
    if fd is not None:
        outfile.drop_lock(lock_path(root), fd)


def part(root: Path, i: int) -> Path:
    """Where the i-th rank is written before :func:`finish`."""
    return staging(root) / f"{PART}{i}"


def discard_parts(root: Path) -> None:
    """Remove the new store being built (a conversion that failed); ``root`` is as it was.
    The lock is given back."""
    try:
        shutil.rmtree(staging(root), ignore_errors=True)
    finally:
        _unlock(root)


def finish(root: Path, ranks: list[dict[str, Any]], **extra: Any) -> Path:
    """Rename each written part (``ranks[i]["part"]``) to its rank's folder, write the
    manifest (each rank's entry: the rest of ``ranks[i]``, and its ``path``) and swap the
    new store in at ``root``. On any failure the new store is removed and ``root`` is
    as it was."""
    new = staging(root)
    entries = []
    try:
        for r in ranks:
            target = new / rank_dir(r["rank"])
            Path(r["part"]).rename(target)
            entries.append({"rank": r["rank"], "path": target.name, **{k: v for k, v in r.items()
                                                                       if k not in ("part", "rank")}})
        with writing(new / MANIFEST, root):  # (a full disk names the store)
            write_manifest(new, entries, **extra)
        _swap(new, root)
    except BaseException:
        discard_parts(root)
        raise
    _unlock(root)
    log.info("wrote store %s: %d ranks", root, len(entries))
    return root / MANIFEST


def _swap(new: Path, root: Path) -> None:
    """Rename the complete store ``new`` to ``root``: onto nothing or an empty folder at
    once; over a store, that store renamed aside first (back, if the second rename
    fails), and removed once the new one is in."""
    real = _real(root)
    try:
        if not real.exists() or not any(real.iterdir()):
            os.rename(new, real)  # POSIX: a folder renamed over an empty folder replaces it
            return
        old = _aside(root)
        _remove_leftover(old)
        os.rename(real, old)
        try:
            os.rename(new, real)
        except BaseException:
            os.rename(old, real)
            raise
    except OSError as e:
        raise OutputError(f"{root}: the new store could not be renamed into place ({e.strerror or e}); "
                          "what was there is as it was") from None
    shutil.rmtree(old, ignore_errors=True)
    if old.exists():
        log.warning("%s: the replaced store could not be removed entirely: %s is left", root, old)
