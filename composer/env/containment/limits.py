"""What bounds a sandboxed run: its limits, its own uid, its memory cgroup, the repository copy's size, and the
variables it sees.

    from composer.env.containment import limits

    limits.Limits(timeout_s=20, memory_mb=1024)    # every bound of one run (sandbox.run_pytest takes them)
    uid = limits.Uids.take(); limits.Uids.give_back(uid)    # a uid no live sandbox on this host holds
    limits.scrubbed_env()                          # the only variables a child sees: none of the parent's

See composer.env.containment.sandbox's docstring for what each bound holds in each containment mode.
SandboxError (what the sandbox refuses) and scrubbed_env live here, at the bottom: patches and sandbox both import
them, and this module imports neither.
"""

import contextlib
import functools
import os
import random
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FILE_LIMIT_MB = 64
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Per-run uids live far above any real account (and below 2^31, where setresuid's -1 sentinel sits).
UID_BASE = 1_500_000_000
UID_SPAN = 1 << 24


class SandboxError(Exception):
    """A path or an input that the sandbox refuses (escapes the repo, malformed)."""


def scrubbed_env(home: str | Path | None = None) -> dict:
    """The only variables a child sees: nothing inherited from the parent."""
    home = str(home or tempfile.gettempdir())
    return {
        "PATH": f"{Path(sys.executable).parent}:{SAFE_PATH}",
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",  # a child killed at the timeout still shows what it printed
    }


@dataclass(frozen=True)
class Limits:
    """What bounds one run (a cold run, or each run of a PytestWorker)."""
    timeout_s: float = 20.0
    memory_mb: int = 1024  # per process (RLIMIT_AS) and, where a cgroup can be made, for the whole tree
    cpu_s: int | None = None  # RLIMIT_CPU; default timeout_s + 1
    max_output: int = 20_000
    max_procs: int = 64
    tmp_mb: int = 256  # the private /tmp and /dev/shm ("root-ns")
    disk_mb: int = 512  # the repository copy's size, polled
    max_files: int = 20_000  # files and folders in the repository copy, polled

    def __post_init__(self):
        bad = [k for k, v in vars(self).items() if v is not None and v <= 0]
        if bad:
            raise SandboxError(f"sandbox limits must be positive: {', '.join(bad)}")


class Uids:
    """Per-run uids unique among the live sandboxes of this host: each is a file made with O_EXCL in a
    root-only folder, holding the pid that owns it; one whose owner died is taken back."""

    DIR = Path(tempfile.gettempdir()) / "composer-sandbox-uids"

    @classmethod
    def take(cls) -> int:
        cls.DIR.mkdir(mode=0o700, exist_ok=True)
        st = cls.DIR.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise SandboxError(f"{cls.DIR} must be a folder of uid {os.geteuid()} with mode 0700")
        first = random.randrange(UID_SPAN)
        for i in range(UID_SPAN):
            uid = UID_BASE + (first + i) % UID_SPAN
            path = cls.DIR / str(uid)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if cls._stale(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return uid
        raise SandboxError("no free sandbox uid")

    @staticmethod
    def _stale(path: Path) -> bool:
        try:
            os.kill(int(path.read_text() or 0), 0)
            return False
        except (ProcessLookupError, ValueError):
            return True
        except (OSError, PermissionError):
            return False

    @classmethod
    def give_back(cls, uid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (cls.DIR / str(uid)).unlink()


@functools.cache
def memory_cgroup() -> tuple[Path, str] | None:
    """(folder under which a sandbox can make its own memory cgroup, "v2" or "v1"), or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return None
    try:
        own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
        mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return None
    found = []
    for head, tail in mounts:
        fstype, _, options = tail.split()[:3]
        point = head.split()[4]
        if fstype == "cgroup2" and "" in own:
            found.append((Path(point + own[""]), "v2", "memory.max"))
        elif fstype == "cgroup" and "memory" in options.split(","):
            key = next((k for k in own if "memory" in k.split(",")), None)
            if key is not None:
                found.append((Path(point + own[key]), "v1", "memory.limit_in_bytes"))
    for base, version, limit in sorted(found, key=lambda f: f[1] != "v2"):
        probe = base / f"composer-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            (probe / limit).write_text(str(64 * 2**20))
            return base, version
        except OSError:
            continue
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
    return None


class Cgroup:
    """A memory cgroup for one sandbox's process tree; the launcher joins it before anything runs."""

    def __init__(self, name: str, memory_mb: int):
        base, self.version = memory_cgroup()
        self.path = base / name
        self.path.mkdir()
        limit = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
        (self.path / limit).write_text(str(memory_mb * 2**20))
        if self.version == "v1":
            with contextlib.suppress(OSError):  # no swap to escape into either (absent without swap accounting)
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(memory_mb * 2**20))

    def join_argv(self) -> list[str]:
        """Prefix that moves the launcher into the cgroup, then execs the rest (children inherit it)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def remove(self) -> None:
        for _ in range(100):  # the namespace is dead by now; its last processes may still be exiting
            with contextlib.suppress(OSError, ValueError):
                for pid in (self.path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


def own_task_count() -> int:
    """The threads of this real uid, which RLIMIT_NPROC counts (threads, not processes): a caller with torch
    loaded holds dozens, and a cap of processes + max_procs would leave a run's pytest no room to start."""
    uid = os.getuid()
    return sum(_tasks(p) for p in Path("/proc").glob("[0-9]*") if _owner(p) == uid)


def _tasks(p: Path) -> int:
    try:
        return len(os.listdir(p / "task"))
    except OSError:  # it ended meanwhile
        return 0


def _owner(p: Path) -> int | None:
    try:
        return p.stat().st_uid
    except OSError:
        return None


def chown_tree(root: Path, uid: int, gid: int) -> None:
    # lchown and no symlink following: a link to /etc/passwd must not hand /etc/passwd over. Files
    # with other hard links are skipped for the same reason (the link could point at a host file).
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if name in filenames and st.st_nlink > 1 and not os.path.islink(p):
                continue
            os.lchown(p, uid, gid)


def readable_tree(root: Path) -> None:
    """Let every user read the tree's files and enter its folders (a grading copy, read-only to its run)."""
    for dirpath, _, filenames in os.walk(root, followlinks=False):
        for p, bits in ((dirpath, 0o555), *((os.path.join(dirpath, f), 0o444) for f in filenames)):
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & bits != bits:
                os.chmod(p, stat.S_IMODE(st.st_mode) | bits)


def tree_size(root: Path, max_files: int) -> tuple[int, int]:
    """(bytes on disk, entries) under root, without following links; stops counting past max_files."""
    size = count = 0
    stack = [str(root)]
    while stack and count <= max_files:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                count += 1
                with contextlib.suppress(OSError):
                    size += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return size, count


