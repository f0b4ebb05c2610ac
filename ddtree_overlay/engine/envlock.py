"""One writer per env, whatever state dir each run uses: an exclusive `flock` on the env's
site-packages directory itself.

The lock lives on the directory's inode, so every run against the env meets it: `sudo` and the
user, two containers sharing the volume, two state dirs. Nothing is written into site-packages
for it, and it goes with the process: a killed holder leaves no stale lock. A second run waits
`settings.lock_timeout_s`, then names the holder: the note the holder left in its state dir, or
else the pid and command line the kernel's lock table (`/proc/locks`) gives for the inode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ddtree_overlay.engine import errors, settings
from ddtree_overlay.engine.ledger import now_utc

_POLL_S = 0.05
OWNER_NOTE = "lock.owner"


@contextmanager
def env_lock(site_packages: Path, state_root: Path, command: str) -> Iterator[None]:
    """Hold the env's lock; ``state_root`` gets a note naming this run for whoever waits."""
    fd = os.open(site_packages, os.O_RDONLY | os.O_DIRECTORY)
    note = state_root / OWNER_NOTE
    try:
        _acquire(fd, site_packages, note)
        # the note only names us to a waiting run; a full state dir fails later, loudly
        with contextlib.suppress(OSError):
            note.write_text(f"pid {os.getpid()} running `{command}` since {now_utc()}\n")
        try:
            yield
        finally:
            note.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the flock


def _acquire(fd: int, site_packages: Path, note: Path) -> None:
    deadline = time.monotonic() + settings.lock_timeout_s()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise errors.env_locked(_holder(site_packages, note), site_packages) from None
            time.sleep(_POLL_S)


def _holder(site_packages: Path, note: Path) -> str:
    pid = _flock_holder_pid(site_packages)
    noted = note.read_text().strip() if note.is_file() else ""
    if noted and (pid is None or noted.startswith(f"pid {pid} ")):
        return noted
    if pid is None:
        return "an unknown process"
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} (`{' '.join(w.decode(errors='replace') for w in words if w)}`)"


def _flock_holder_pid(path: Path) -> int | None:
    """The pid `/proc/locks` gives for the granted flock on ``path``'s inode, if it can be read."""
    st = path.stat()
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device and fields[4].isdigit():
            return int(fields[4])
    return None
