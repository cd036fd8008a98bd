"""Every file geosim writes goes through here: atomic replacement, appends that append, locks.

- write_atomic: a unique temporary file beside the target (mkstemp: O_CREAT|O_EXCL, so it
  never follows a symlink someone planted), fsynced, then os.replace: a reader sees the old
  file or the new one, never half of either, and two writers never share a temporary name.
  Only a regular file (or a missing one) is replaced: a character device or a FIFO given as
  the output is written through, never renamed over (`--out /dev/null` run as root must not
  replace the system's /dev/null); a block device, socket or directory is refused. A file
  that is replaced keeps its mode; a new one gets 0666 less the umask, as `>` would.
- append_lines: one O_APPEND write per call under the file's lock, then fsync.
- locked: an exclusive flock on `<file>.lock` (opened with O_NOFOLLOW), held while a writer
  reads-then-writes, so two writers cannot both decide from the same old contents. A device
  or FIFO gets no lock file beside it (nothing there is read back or replaced).
- check_output_path: the same refusals, before any work starts.
- csv_cell: a spreadsheet would run a cell starting with = + - @ as a formula.

Every failure of the file system (no space, permission, a directory, a read-only disk) is a
GeosimError naming the path: one line and exit 2, never a traceback. Temporary files carry
the writer's pid, so a later writer sweeps those whose process is gone (a killed trace could
otherwise leave a gigabyte behind).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path

from geosim.base.errors import GeosimError

LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
# a temporary file without a pid in its name (an older geosim wrote it): swept once this old, seconds
UNNAMED_TMP_AGE_S = 24 * 3600

_WHY = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.EISDIR: "is a directory, not a file",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENOENT: "no such file or directory",
    errno.ENXIO: "a FIFO with no reader (start the reader first)",
    errno.EIO: "input/output error",
    errno.EFBIG: "file too large for this file system",
}


class OutputError(GeosimError):
    """An output could not be written: one line naming the path; nothing existing was replaced."""


def output_error(path, exc: OSError, doing: str = "cannot write", file: bool = True) -> OutputError:
    why = _WHY.get(exc.errno, exc.strerror or str(exc))
    return OutputError(f"{doing}: {why}" + ("; nothing there was replaced" if file else ""), source=str(path))


def umask() -> int:
    """The process's umask, read without changing it (os.umask can only be read by setting it)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def _stat(path: Path):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise output_error(path, exc, "cannot look at it") from None


def _pass_through(st) -> bool:
    """A character device or a FIFO: written through, in place."""
    return st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))


def _refuse_kind(st, path: Path, flag: str | None) -> None:
    if st is None or stat.S_ISREG(st.st_mode) or _pass_through(st):
        return
    kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
    raise OutputError(f"is {kind}, not a file: geosim writes regular files, a character device or a FIFO",
                      source=flag or str(path))


def check_output_path(path: str | Path, flag: str | None = None) -> Path:
    """Fail before any work if an output cannot be written where asked (missing directory, a
    directory, a block device, a directory it may not write into)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    st = _stat(path)
    _refuse_kind(st, path, flag)
    if _pass_through(st):
        if not os.access(path, os.W_OK):
            raise OutputError("cannot write to it (permission denied)", source=flag or str(path))
        return path
    if not parent.is_dir():
        raise GeosimError(f"no such directory {str(parent)!r} for the output", source=flag or str(path))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GeosimError(f"cannot write into {str(parent)!r}", source=flag or str(path))
    return path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _chunks(data):
    """bytes from str, bytes, or an iterable of either (a large output written as it is produced,
    never held whole in memory)."""
    if isinstance(data, (str, bytes, bytearray)):
        yield data.encode() if isinstance(data, str) else bytes(data)
        return
    pending, size = [], 0  # many small pieces (a JSON encoder's) joined into writes of ~1 MiB
    for chunk in data:
        pending.append(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
        size += len(pending[-1])
        if size >= 1 << 20:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def _write_through(path: Path, data) -> None:
    """Write into a character device or a FIFO where it is: no temporary file, no rename, no fsync."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO with no reader: ENXIO, not a hang
    fd = os.open(path, flags)
    try:
        os.set_blocking(fd, True)
        for chunk in _chunks(data):
            _write_all(fd, chunk)
    finally:
        os.close(fd)


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}."


def sweep_stale_temporaries(path: str | Path) -> int:
    """Remove this output's temporary files left by geosim processes that are gone (killed while
    writing); a running writer's are kept. Returns how many were removed."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    prefix, removed = _tmp_prefix(path), 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        middle = name[len(prefix):-len(TMP_SUFFIX)]
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            continue  # only plain files of ours
        pid_text, _, rest = middle.partition(".")
        if rest and pid_text.isdigit():
            if _alive(int(pid_text)):
                continue
        elif time.time() - st.st_mtime < UNNAMED_TMP_AGE_S:
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_atomic(path: str | Path, data, mode: int | None = None) -> None:
    """Replace `path` with `data` (str, bytes, or an iterable of them, written as they come)
    atomically (see the module's docstring); `mode` for a new file (default 0666), less the umask.
    Any OSError is one line naming the path."""
    path = Path(path)
    st = _stat(path)
    _refuse_kind(st, path, None)
    try:
        if _pass_through(st):
            _write_through(path, data)
            return
        perms = stat.S_IMODE(st.st_mode) if st is not None else (0o666 if mode is None else mode) & ~umask()
        sweep_stale_temporaries(path)
        parent = path.parent if str(path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f"{_tmp_prefix(path)}{os.getpid()}.", suffix=TMP_SUFFIX)
    except OSError as exc:
        raise output_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in _chunks(data):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), perms)
        now = _stat(path)  # made a device or FIFO meanwhile: write through it, never rename over it
        if _pass_through(now) or (now is not None and not stat.S_ISREG(now.st_mode)):
            _refuse_kind(now, path, None)
            with open(tmp, "rb") as written:  # what was produced once, from the temporary file
                _write_through(path, iter(lambda: written.read(1 << 20), b""))
            os.unlink(tmp)
            return
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise output_error(path, exc) from None
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
    if _pass_through(_stat(Path(path))):  # a device or FIFO: nothing read back, no `.lock` beside /dev/null
        yield
        return
    target = Path(path) / LOCK_SUFFIX if Path(path).is_dir() else lock_path(path)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
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
        except OSError as exc:  # a file system without locks (some network ones): one line, not a traceback
            raise GeosimError(f"cannot lock ({exc.strerror})", source=str(target)) from None
        try:  # who holds it, for the message a second writer gets; a full disk leaves it unsaid, not fatal
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock, also when the process is killed


def append_lines(path: str | Path, lines: list[str]) -> None:
    """Append whole lines with one O_APPEND write (never interleaved with another writer's), then
    fsync; into a device or FIFO, written through. An OSError is one line naming the path."""
    if not lines:
        return
    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
    st = _stat(Path(path))
    _refuse_kind(st, Path(path), None)
    try:
        if _pass_through(st):
            _write_through(Path(path), data)
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            written = os.write(fd, data)
            if written != len(data):  # regular files do not short-write; refuse to leave half a line
                os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise output_error(path, exc, "cannot append") from None


def csv_cell(value):
    """A cell a spreadsheet will not run: text starting with = + - @ (or a tab or carriage return,
    which some strip first) gets a leading apostrophe. Numbers are left as they are."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
