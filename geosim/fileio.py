"""Crash-safe output: atomic replacement, appends that append, and exclusive locks.

Every file geosim writes goes through here:
- write_atomic: a unique temporary file beside the target (mkstemp: O_CREAT|O_EXCL, so it
  never follows a symlink someone planted), fsynced, then os.replace: a reader sees the old
  file or the new one, never half of either, and two writers never share a temporary name.
- append_lines: one O_APPEND write per call under the file's lock, then fsync.
- locked: an exclusive flock on `<file>.lock` (opened with O_NOFOLLOW), held while a writer
  reads-then-writes, so two writers cannot both decide from the same old contents.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path

from geosim.errors import GeosimError

LOCK_SUFFIX = ".lock"


def check_output_path(path: str | Path, flag: str | None = None) -> Path:
    """Fail before any work if an output cannot be written where asked (missing directory, a directory)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise GeosimError(f"no such directory {str(parent)!r} for the output", source=flag or str(path))
    if path.is_dir():
        raise GeosimError("is a directory, not a file", source=flag or str(path))
    if not os.access(parent, os.W_OK):
        raise GeosimError(f"cannot write into {str(parent)!r}", source=flag or str(path))
    return path


def write_atomic(path: str | Path, data: str | bytes, mode: int = 0o644) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save_figure(fig, path: str | Path, **savefig) -> None:
    """A matplotlib figure written through write_atomic (rendered in memory first; the format from the suffix)."""
    import io

    buffer = io.BytesIO()
    savefig.setdefault("format", Path(path).suffix.lstrip(".") or "png")
    fig.savefig(buffer, **savefig)
    write_atomic(path, buffer.getvalue())


def make_output_dir(path: str | Path, flag: str | None = None) -> Path:
    """An output directory: made if missing, but never its missing parents (a typo in a parent
    would otherwise scatter results into a new tree); refused if it is a file."""
    path = Path(path)
    try:
        path.mkdir(exist_ok=True)
    except FileNotFoundError:
        raise GeosimError(f"no such directory {str(path.parent)!r} to make it in", source=flag or str(path)) from None
    except (FileExistsError, NotADirectoryError):
        raise GeosimError("exists and is not a directory", source=flag or str(path)) from None
    except OSError as exc:
        raise GeosimError(f"cannot make this directory ({exc.strerror})", source=flag or str(path)) from None
    if not path.is_dir():
        raise GeosimError("exists and is not a directory", source=flag or str(path))
    return path


def lock_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + LOCK_SUFFIX)


@contextlib.contextmanager
def locked(path: str | Path, *, wait: bool = True, what: str = "file"):
    """Hold an exclusive lock for `path` (a file or a directory). With wait=False, fail at once
    if another process holds it, naming that process."""
    target = Path(path) / LOCK_SUFFIX if Path(path).is_dir() else lock_path(path)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GeosimError("the lock file is a symbolic link; remove it", source=str(target)) from None
        raise GeosimError(f"cannot create the lock file ({exc.strerror})", source=str(target)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                raise GeosimError(f"another geosim ({holder}) is writing this {what}; wait for it to finish "
                                  f"or use another output", source=str(path)) from None
            fcntl.flock(fd, fcntl.LOCK_EX)  # writers of a records file take turns: each holds it for one append
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock, also when the process is killed


def append_lines(path: str | Path, lines: list[str]) -> None:
    """Append whole lines with one O_APPEND write (never interleaved with another writer's), then fsync."""
    if not lines:
        return
    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # regular files do not short-write; refuse to leave half a line
            os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            raise OSError(f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)
