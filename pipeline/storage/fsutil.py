"""Atomic file writes: a step killed midway leaves no half-written output behind."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xxhash

TMP_MARK = ".tmp-"
# The writer is part of a temporary's name, so a cleanup never removes a file another live job is
# writing (two sweep points staging the same shards into one node-local directory, say).
WRITER = f"{socket.gethostname().replace('~', '-')}~{os.getpid()}~"
ORPHAN_AGE_S = 6 * 3600  # a temporary from another host counts as left behind only after this long
# mkstemp creates 0600 files; outputs should get the usual permissions (0666 less the umask).
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


@contextlib.contextmanager
def atomic_path(final: Path | str) -> Iterator[Path]:
    """Yield a temporary path next to `final`; rename it over `final` only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}{TMP_MARK}{WRITER}", dir=final.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(final: Path | str, text: str) -> None:
    with atomic_path(final) as tmp:
        tmp.write_text(text)


def write_json_atomic(final: Path | str, obj: Any) -> None:
    write_text_atomic(final, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def file_signature(*paths: Path) -> list[int]:
    """Each file's inode, size and modification time (ns): what tells a file written again from one kept
    as it was, without reading it (atomic writes replace the inode)."""
    signature = []
    for path in paths:
        st = os.stat(path)
        signature += [st.st_ino, st.st_size, st.st_mtime_ns]
    return signature


def remove_stale_temporaries(directory: Path) -> int:
    """Delete temporaries left by an interrupted run (they are never valid outputs): those whose writer
    process on this host is gone, and those from other hosts older than ORPHAN_AGE_S."""
    removed = 0
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.startswith(".") and TMP_MARK in p.name and _abandoned(p):
                p.unlink(missing_ok=True)
                removed += 1
    return removed


def _abandoned(path: Path) -> bool:
    host, _, rest = path.name.split(TMP_MARK, 1)[1].partition("~")
    pid = rest.partition("~")[0]
    if not pid.isdigit():
        return True  # not written by this scheme
    if host != WRITER.partition("~")[0]:
        with contextlib.suppress(OSError):
            return time.time() - path.stat().st_mtime > ORPHAN_AGE_S
        return False
    if int(pid) == os.getpid():
        return True  # an earlier attempt in this very process
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class Checksum:
    """The checksum sim2dl records for files: xxh3-128, as text prefixed with the algorithm name."""

    def __init__(self) -> None:
        self._digest = xxhash.xxh3_128()

    def update(self, data: Any) -> None:
        self._digest.update(data)

    def text(self) -> str:
        return "xxh3_128:" + self._digest.hexdigest()


def file_checksum(path: Path | str, chunk_bytes: int = 8 << 20) -> str:
    """The Checksum of a file's bytes, read in bounded chunks into one reused buffer."""
    checksum = Checksum()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            checksum.update(view[:n])
    return checksum.text()


def copy_range(source: int, target: int, offset: int, count: int) -> None:
    """`count` bytes of the file open as `source` from `offset` appended to `target`, in the kernel where
    it can (copy_file_range: no trip through user memory; a reflink on file systems that share extents),
    else read and written in bounded pieces (another file system on an old kernel, or one without it)."""
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(source, target, count - done, offset + done)
            if n == 0:
                raise OSError(f"copy_file_range: end of file {count - done} bytes early")
            done += n
        return
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
            raise
    while done < count:
        data = os.pread(source, min(count - done, 8 << 20), offset + done)
        if not data:
            raise OSError(f"read of {count} bytes at {offset} ended {count - done} bytes early")
        view = memoryview(data)
        while view:
            view = view[os.write(target, view) :]
        done += len(data)
