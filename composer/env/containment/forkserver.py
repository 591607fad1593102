"""A fork server that starts each pytest run in a fresh sandbox with pytest already imported (root, Linux).

    server = forkserver.Server()            # started lazily by sandbox.run_pytest in "root-ns" mode
    server.send(request, [out_w, report_w, status_w])   # one run; see `_child` for the request's fields
    python -m composer.env.containment.forkserver FD    # the server process itself (FD: its end of a socket pair)

Why: a cold sandboxed pytest run spends ~200 ms of CPU starting an interpreter and importing pytest, which a
warm PytestWorker avoids only by reusing one sandbox for an episode's runs. Grading must not reuse anything a
policy's code has run in, so it used to pay the cold price for every submission. Here a trusted process, root,
outside any namespace, imports pytest once and never runs anything else; per run it forks a child that enters
new mount, PID, network, IPC and UTS namespaces, builds the filesystem of composer.env.containment.sandbox.layout (the
same description bubblewrap carries out for the other runs), joins the run's memory cgroup, sets the rlimits, drops
to the run's uid with no capability and no_new_privs, and only then imports anything of the repository.

Per run: the server forks C1 (unshares the namespaces, reports its pid, waits) and C1 forks C2, pid 1 of the
new PID namespace, which joins the cgroup, builds the filesystem and runs pytest.main. C1 writes "pid N" and,
when C2 ends, "rc N" down the status pipe; the caller kills C1 through a pidfd on timeout, and C2 dies with it
(parent-death signal), and with it its whole namespace. C1 and C2 close the server's socket first thing: code
under test never holds a way to ask for runs. The server dies with the process that started it.
"""

import ctypes
import fcntl
import gc
import importlib
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# A mount's flags as statvfs reports them, and as mount(2) takes them.
STATVFS_FLAGS = ((os.ST_RDONLY, MS_RDONLY), (os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                 (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                 (os.ST_RELATIME, MS_RELATIME))
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 24, 36, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
REPORT_FD = 3  # where the run finds the outcome plugin's pipe

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = [x.encode() if isinstance(x, str) else x for x in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {source} on {target}")


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _bind(source: str, target: str, read_only: bool, device: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (0 if device else MS_NODEV) | (MS_RDONLY if read_only else 0)
    _mount(None, target, None, flags | _source_flags(target))


def _source_flags(path: str) -> int:
    """The flags of the mount a bind copied (read at its new place): in a user namespace they are locked, and a
    remount that dropped one (a host /dev mounted noexec) would fail; so they are kept in every mode."""
    held = os.statvfs(path).f_flag
    return sum(ms for st, ms in STATVFS_FLAGS if held & st)


def _enter(layout: list, root: str) -> None:
    """Build `layout` (composer.env.containment.sandbox.layout) on a tmpfs at `root` and make it this process's /."""
    os.umask(0o022)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of what follows reaches the host's mount table
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for op in layout:
        kind, path = op[0], root + (op[2] if op[0] == "symlink" else op[1] if len(op) > 1 else "")
        if kind == "symlink":
            os.symlink(op[1], path)
        elif kind == "dir":
            os.makedirs(path, 0o755, exist_ok=True)
        elif kind in ("ro", "rw"):
            _bind(op[1], path, kind == "ro")
        elif kind == "tmpfs":
            os.makedirs(path, exist_ok=True)
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={op[2]},mode=1777")
        elif kind == "proc":
            os.makedirs(root + "/proc", exist_ok=True)
            _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        elif kind == "dev":
            for name in DEVICES:
                _bind(f"/dev/{name}", f"{root}/dev/{name}", False, device=True)
            for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                                 ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
                os.symlink(target, f"{root}/dev/{name}")
        else:
            raise ValueError(f"unknown layout operation {op!r}")
    os.mkdir(root + "/.old")
    _check(_libc.syscall(SYS_PIVOT_ROOT[platform.machine()], root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _drop_bounding_set() -> None:
    """No capability in the bounding set: none comes back at the next exec, even to (mapped) root."""
    cap = 0
    while _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) == 0:  # EINVAL past the kernel's last
        cap += 1


def _drop(uid: int) -> None:
    """No capability, not even in the bounding set, the run's uid and gid, no supplementary groups, no_new_privs."""
    _drop_bounding_set()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from uid 0 to another: permitted, effective and ambient capabilities go
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # changing uid cleared it


def _run(request: dict, out_fd: int, report_fd: int, root: str, pytest) -> None:
    """C2: pid 1 of the new PID namespace. Build the sandbox, drop privileges, run pytest; never returns."""
    out_fd, report_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (out_fd, report_fd))  # clear of 0-3
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if request["cgroup"]:  # C2 joins, not C1: the cgroup empties (and can go) as soon as the run's tree is gone
            with open(request["cgroup"], "w") as f:
                f.write("0")  # "the writer": its pid in this new PID namespace would name another process
        if request["layout"] is not None:  # None: the uncontained baseline of benchmarks (a PID namespace alone)
            _enter(request["layout"], root)
        import resource
        for name, value in request["rlimits"]:
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
        if request["uid"] is not None:
            _drop(request["uid"])
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(report_fd, REPORT_FD)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        keep = {0, 1, 2, REPORT_FD}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the listing's own fd, gone already
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**request["env"], "COMPOSER_SANDBOX_REPORT_FD": str(REPORT_FD)})
        os.makedirs(os.environ["HOME"], exist_ok=True)
    except BaseException:
        why = f"[sandbox: the fork server could not start the run]\n{traceback.format_exc()}".encode()
        for fd in (out_fd, 2):  # out_fd is closed once the descriptors were cleared; 2 is it then
            try:
                os.write(fd, why)
                break
            except OSError:
                continue
        os._exit(126)
    run_pytest(pytest, request["args"], [os.getcwd(), request["plugin_dir"]])  # `python -m pytest` with PYTHONPATH


# The two functions below run in the warm worker's server too (composer.env.containment.worker.ZYGOTE takes their
# source): they may use only the modules both import, and nothing else of this file.
def preload_pytest():
    """pytest, and what pytest.main would otherwise import on every run, imported once (into a server's heap)."""
    import pytest
    from _pytest.config import default_plugins
    for name in [*("_pytest." + p for p in default_plugins), "_pytest._argcomplete", "faulthandler", "pdb", "tomllib"]:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    return pytest


def run_pytest(pytest, args: list[str], path: list[str]) -> None:
    """The run, in a child forked from a server that preloaded pytest: pytest.main(args) with `path` ahead of
    sys.path, exiting with its code (3 where it raised); never returns."""
    tempfile.tempdir = None  # per-process caches that would carry the server's state into the run
    random.seed()
    importlib.invalidate_caches()
    sys.path[:0] = path
    sys.argv = [pytest.__file__, *args]
    try:
        rc = int(pytest.main(args))
    except BaseException:
        traceback.print_exc()
        rc = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def _child(request: dict, fds: list[int], sock: socket.socket, root: str, pytest) -> None:
    """C1: unshare, fork C2, report; never returns."""
    out_fd, report_fd, status_fd = fds
    try:
        sock.close()  # first: nothing below the server may ask it for runs
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setsid()
        os.write(status_fd, f"pid {os.getpid()}\n".encode())
        flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
        _check(_libc.unshare(flags if request["layout"] is not None else CLONE_NEWPID), "unshare")
        pid = os.fork()
        if pid == 0:
            try:
                os.close(status_fd)
                _run(request, out_fd, report_fd, root, pytest)
            finally:
                os._exit(126)  # never back into the server's loop, whatever _run raised
        os.close(out_fd)
        os.close(report_fd)
        status = os.waitpid(pid, 0)[1]
        os.write(status_fd, f"rc {os.waitstatus_to_exitcode(status)}\n".encode())
    except BaseException:
        os.write(status_fd, f"error {traceback.format_exc()!r}\n".encode())
    os._exit(0)


def serve(fd: int) -> None:
    """The server: preload pytest, then fork one C1 per request until the socket closes."""
    sock = socket.socket(fileno=fd)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # a run whose C1 was killed is reparented here and reaped, not left a zombie
    if os.getppid() == 1:  # the starter died before the line above
        return
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # preload only the host's pytest, never a module of a folder
    pytest = preload_pytest()
    root = tempfile.mkdtemp(prefix="composer-forkserver-")  # each run's new / is mounted here, in its namespace
    gc.freeze()
    sock.sendall(json.dumps({"ready": sorted({m.split(".")[0] for m in sys.modules})}).encode())
    sock.settimeout(0.5)
    try:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            except TimeoutError:
                msg, fds = None, []
            else:
                if not msg:
                    return
            if msg:
                if os.fork() == 0:
                    _child(json.loads(msg), fds, sock, root, pytest)
                for f in fds:
                    os.close(f)
            _reap()  # each C1, so its CPU time (and its run's) adds to this process's children's (benchmarks read it)
    finally:
        os.rmdir(root)


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


class Server:
    """The caller's handle on one fork server process (started on first use, restarted if it died)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sock = self._proc = None
        self.preloaded: frozenset[str] = frozenset()

    def send(self, request: dict, fds: list[int]) -> None:
        with self._lock:
            self._ensure()
            socket.send_fds(self._sock, [json.dumps(request).encode()], fds)

    def modules(self) -> frozenset[str]:
        """Top-level names of the modules the server has imported (a run would not import them afresh)."""
        with self._lock:
            self._ensure()
            return self.preloaded

    def _ensure(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
               "PYTHONNOUSERSITE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        started, box = threading.Event(), {}

        def keeper():
            # The server's parent-death signal fires when the *thread* that started it ends: started from a passing
            # thread (a pool's), it would die with that thread. This one lives as long as the server, or the process.
            try:
                box["proc"] = subprocess.Popen(
                    [sys.executable, "-m", "composer.env.containment.forkserver", str(theirs.fileno())], cwd="/",
                    env=env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
            except BaseException as e:
                box["error"] = e
            finally:
                theirs.close()
                started.set()
            if "proc" in box:
                box["proc"].wait()

        threading.Thread(target=keeper, name="composer-forkserver", daemon=True).start()
        started.wait()
        if "error" in box:
            raise OSError(f"the fork server did not start: {box['error']}")
        self._proc = box["proc"]
        ours.settimeout(30)
        ready = ours.recv(1 << 20)
        ours.settimeout(None)
        if not ready:
            self._proc.wait()
            raise OSError(f"the fork server did not start (exit {self._proc.returncode})")
        self.preloaded = frozenset(json.loads(ready)["ready"])
        self._sock = ours

    def children_cpu_s(self) -> float:
        """CPU seconds of the runs this server has reaped (and of the server itself); 0.0 when none is running."""
        try:
            fields = open(f"/proc/{self._proc.pid}/stat").read().rsplit(")", 1)[1].split()
        except (AttributeError, OSError):
            return 0.0
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._proc.wait()
                self._sock = self._proc = None


def enter_and_exec(root: str, layout: list, argv: list[str]) -> None:
    """The "user-ns" mode's launcher (`python -I forkserver.py --enter ROOT LAYOUT -- ARGV`), run as the mapped root
    of a new user namespace with new mount and PID namespaces (util-linux unshare): build `layout` on a tmpfs at
    ROOT (a folder of the caller's, never a source of the layout) as root-ns does, so that nothing of the caller's
    files but the run's own is there (the checkout, the cache with grading's probes and task records, the home
    folder, other episodes, the host /tmp); then exec ARGV in the run's folder with no capability left (an empty
    bounding set, no_new_privs), so the run can neither undo a mount nor remount its read-only parts."""
    cwd = os.getcwd()
    os.makedirs(root, exist_ok=True)
    _enter(layout, root)
    os.chdir(cwd)
    _drop_bounding_set()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    if sys.argv[1] == "--enter":
        enter_and_exec(sys.argv[2], json.loads(sys.argv[3]), sys.argv[5:])
    serve(int(sys.argv[1]))
