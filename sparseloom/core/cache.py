"""Where files go: the cache of what sparseloom builds (workloads, zoos, profiles, keyed by config
hashes) and the folders and files a user names.

Commands call :func:`ensure_directory` on their output folder *before* any long work, so that a
typo in ``--out`` costs a second, not the minutes of measuring before the write; every
``OSError`` about a path the user chose becomes one :class:`~sparseloom.core.errors.PathError`
line naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparseloom.core.errors import PathError

CACHE_DIR_ENV = "SPARSELOOM_CACHE_DIR"
#: The file of a cache root that every process using the root holds a shared ``flock`` on, for
#: its whole life; ``sparseloom cache prune`` takes it exclusively, so it never removes what a
#: running process may read (:mod:`sparseloom.cli.cache_prune`).
IN_USE_FILE = ".in-use"
#: Cache roots already checked by this process (the check writes a file: do it once).
_checked_roots: set[Path] = set()
#: The open descriptor of each root's in-use lock: closing it would release the lock.
_in_use: dict[Path, int] = {}
_in_use_guard = threading.Lock()  # threads calling cache_dir() first at once open one


def cache_root(override: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The cache root :func:`cache_dir` uses and how the user set it (``cache folder
    ($SPARSELOOM_CACHE_DIR)``), without creating, checking or locking anything."""
    if override is not None:
        root, source = Path(override), "cache folder"
    elif os.environ.get(CACHE_DIR_ENV):
        root, source = Path(os.environ[CACHE_DIR_ENV]), f"cache folder (${CACHE_DIR_ENV})"
    else:
        import platformdirs

        root, source = Path(platformdirs.user_cache_dir("sparseloom")), "cache folder"
    return root.expanduser().resolve(), source


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else ``$SPARSELOOM_CACHE_DIR``, else the user cache dir.

    The first call for a root marks it in use by this process (:func:`hold_in_use`).

    :raises PathError: the root is a file or cannot be created or written (it says which
        setting chose it and how to choose another).
    """
    root, source = cache_root(override)
    if root not in _checked_roots:
        ensure_directory(root, source,
                         f"set {CACHE_DIR_ENV} to a folder you may write to, e.g. "
                         f"export {CACHE_DIR_ENV}=$HOME/.cache/sparseloom")
        hold_in_use(root)
        _checked_roots.add(root)
    return root


def hold_in_use(root: Path) -> None:
    """Hold a shared lock on ``root``'s :data:`IN_USE_FILE` until the process ends.

    While a ``sparseloom cache prune`` holds it exclusively this waits for the prune to end,
    saying so on stderr. Without ``fcntl``, or on a file system that refuses locks or the
    file, nothing is held (the cache works as before; a prune cannot see this process).
    """
    try:
        import fcntl
    except ImportError:
        return
    with _in_use_guard:
        if root in _in_use:
            return
        try:
            # Read-only, so that another user of a shared cache can open it to lock it too.
            descriptor = os.open(root / IN_USE_FILE, os.O_RDONLY | os.O_CREAT, 0o666)
        except OSError:
            return
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                import sys

                print(f"Waiting for `sparseloom cache prune` to finish with {root}",
                      file=sys.stderr, flush=True)
                fcntl.flock(descriptor, fcntl.LOCK_SH)
        except OSError:
            os.close(descriptor)
            return
        _in_use[root] = descriptor


def release_in_use(root: Path) -> None:
    """Release this process's shared lock on ``root`` (a prune must: one process cannot hold
    the lock shared and exclusive at once); the next :func:`cache_dir` call takes it again."""
    _checked_roots.discard(root)
    with _in_use_guard:
        descriptor = _in_use.pop(root, None)
    if descriptor is not None:
        os.close(descriptor)


def cache_notice(message: str) -> None:
    """Tell the user on stderr, in one ``Warning:`` line, that a cache entry was damaged and is
    being rebuilt (a library caller sees it too: it explains a slow call)."""
    import sys

    print(f"Warning: {message}", file=sys.stderr, flush=True)


def cache_name(name: str) -> str:
    """The one file-name form of a workload, task or unit name in the cache.

    Characters outside ``A-Z a-z 0-9 . _ + -`` become ``_``; when any did, a short hash of the
    name follows, so that two names never share a folder (``café`` and ``cafè`` are
    ``caf_-<hash>`` and ``caf_-<other hash>``). Every path into the cache that holds a name
    is made with this function, so that a name written under one is found under it again.
    """
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if safe == name and safe not in ("", ".", ".."):
        return safe
    return f"{safe}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def config_hash(config: Any, length: int = 16) -> str:
    """A stable hex digest of a JSON-serialisable config (keys sorted)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing) while the block runs.

    Concurrent runs that build or update the same cache entry take it so that the work is done
    once and no update is lost. Where the OS has no ``fcntl`` the block runs unlocked (the
    atomic renames of cache writes alone keep the cache consistent there).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a+b") as handle:
        try:
            import fcntl
        except ImportError:
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def file_hash(path: str | os.PathLike[str]) -> str:
    """The SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: What to do about the common errors, by ``errno``.
_FIXES = {
    errno.ENOENT: "check the path",
    errno.EACCES: "choose a folder you may write to",
    errno.EPERM: "choose a folder you may write to",
    errno.EROFS: "the file system is read-only; choose another folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EEXIST: "a file of that name is in the way; remove it or choose another path",
    errno.EISDIR: "it is a folder; give a file name",
    errno.ENOSPC: "the disk is full; free space or choose another folder",
}


def describe_os_error(error: OSError) -> str:
    """``error``'s reason in words (``Permission denied``), without the repeated path."""
    return error.strerror or type(error).__name__


def path_error(path: str | os.PathLike[str], error: OSError, doing: str,
               fix: str | None = None) -> PathError:
    """A :class:`PathError`: ``cannot <doing> <path>: <reason>; <fix>``."""
    advice = fix or _FIXES.get(error.errno or 0, "check the path and its permissions")
    return PathError(f"cannot {doing} {os.fspath(path)}: {describe_os_error(error)}; {advice}")


def ensure_directory(path: str | os.PathLike[str], what: str = "output folder",
                     fix: str | None = None) -> Path:
    """Create ``path`` (and its parents) if needed and check that files can be written in it.

    :param what: how the message names the folder (``--out folder``, ``cache folder``).
    :param fix: what to tell the user when it is unusable (default: by the kind of error).
    :raises PathError: it is a file, lies under a file, or cannot be created or written.
    """
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise PathError(f"{what} {folder} is a file, not a folder; "
                        f"{fix or 'remove it or choose another path'}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # os.access is not enough: it says yes to root on a read-only mount and to anyone on
        # some network file systems. Writing a file is the only real test.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise path_error(folder, error, f"write to {what}", fix) from None
    return folder


def ensure_parent(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Check that the file ``path`` can be written: its folder is usable and it is no folder."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise PathError(f"{what} {target} is a folder; give a file name")
    ensure_directory(target.parent if str(target.parent) else Path("."),
                     f"the folder of {what} {target.name!r}")
    return target


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], what: str = "file") -> Iterator[Path]:
    """Wrap writes of ``path`` so that any ``OSError`` becomes one :class:`PathError` line."""
    try:
        yield Path(path)
    except OSError as error:
        raise path_error(path, error, f"write {what}") from None
