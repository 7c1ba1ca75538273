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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparseloom.core.errors import PathError

CACHE_DIR_ENV = "SPARSELOOM_CACHE_DIR"
#: Cache roots already checked by this process (the check writes a file: do it once).
_checked_roots: set[Path] = set()


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else ``$SPARSELOOM_CACHE_DIR``, else the user cache dir.

    :raises PathError: the root is a file or cannot be created or written (it says which
        setting chose it and how to choose another).
    """
    if override is not None:
        root, source = Path(override), "cache folder"
    elif os.environ.get(CACHE_DIR_ENV):
        root, source = Path(os.environ[CACHE_DIR_ENV]), f"cache folder (${CACHE_DIR_ENV})"
    else:
        import platformdirs

        root, source = Path(platformdirs.user_cache_dir("sparseloom")), "cache folder"
    root = root.expanduser().resolve()
    if root not in _checked_roots:
        ensure_directory(root, source,
                         f"set {CACHE_DIR_ENV} to a folder you may write to, e.g. "
                         f"export {CACHE_DIR_ENV}=$HOME/.cache/sparseloom")
        _checked_roots.add(root)
    return root


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
