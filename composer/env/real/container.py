"""Real SWE-bench instances in containers: one per episode from the instance image, grading in a fresh one.

    from composer.env.real import container

    container.problems(record)                     # [] when the engine runs and the instance image is here
    ws = container.Workspace(record, Path("ep/repo"))     # /testbed copied out to ep/repo and mounted back
    run = ws.run_tests(["tests/test_x.py::test_y"], timeout_s=600)   # a sandbox.TestRun
    ws.close()                                     # the container is gone (also when this process dies)
    report = container.grade(prediction, record, timeout_s=1800)     # swebench's eval script and log parser
    held = container.held_out(record)     # its held-out probes: computed once per image and instance, then cached

Engine: the `podman` or `docker` CLI named by COMPOSER_CONTAINER_ENGINE (a name or a path; default podman, else
docker). Image: the record's `image` field, else the name swebench derives (`swebench/sweb.eval.x86_64.<id with
"__" as "_1776_">:latest`); it is never pulled: build one with scripts/swebench-image/build.sh or pull it yourself.

Every container runs with --network none, CPU, memory, process and open-file limits, every capability dropped but
root's file permissions (CHOWN, DAC_OVERRIDE, FOWNER), and no new privileges. Its main process is `cat`, reading a
pipe that this process holds, under --rm: when the pipe closes (close(), or this process dying, SIGKILL included)
cat ends, the container stops and the engine removes it.

Episodes: the agent's tools work on a host copy of the image's /testbed (without .git), mounted back at /testbed,
so `run_tests` runs the image's own environment on the agent's files; the task's tests stay hidden (test_patch is
never applied to the copy). Grading (swebench 4.1.0, pinned in pyproject): in a fresh container the prediction's
patch is applied the way the harness does (git apply, then with --reject, then patch --fuzz=5), then the harness's
eval script for the instance runs (test files reset to the base commit, test patch applied, the spec's test
command), and the harness's log parser and report decide: resolved when every FAIL_TO_PASS and PASS_TO_PASS test
passes. composer.env.real.swebench.evaluate first drops test files and test configuration from the patch (a conftest.py
the agent wrote would steer the harness's run). What grading adds to the harness's way, as for embedded tasks: the
changed source files are scanned (composer.env.defences.tampering) before anything runs, and where the test command is
pytest, the eval script stops after applying the test patch while canaries are planted in the test files and the
tests renamed (composer.env.defences.canaries), and the instance's held-out probes planted beside them (held_out:
computed once per image and instance from the gold patch and the base, in containers of their own, then cached); the
tests then run with the values they compare made plain (GRADING_PLUGIN) and as an unprivileged uid that cannot change a
file of the repository (READ_ONLY). The log parser's outcomes are read back under the task's names, and the
probes' recorded outcomes are compared with the gold patch's outside the container.
"""

import base64
import functools
import hashlib
import json
import os
import random
import secrets
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from composer import files, paths
from composer.env.containment import patches, sandbox
from composer.env.defences import canaries, grading, layers, probes, real_probes

NAMESPACE = "swebench"  # the Docker Hub organisation of the official instance images
LABEL = "composer.env.container"  # on every container this module starts: `podman ps -a --filter label=...`
START_TIMEOUT_S = 120.0
MAX_OUTPUT = 50_000_000  # bytes of a command's output kept (its end)


@dataclass(frozen=True)
class Limits:
    """What bounds one container (the whole tree of processes in it)."""
    cpus: float = 2.0
    memory: str = "4g"
    pids: int = 1024
    open_files: int = 4096


def engine() -> str:
    """The container CLI's path: COMPOSER_CONTAINER_ENGINE (podman or docker, a name or a path), else the first found."""
    wanted = os.environ.get("COMPOSER_CONTAINER_ENGINE")
    for name in [wanted] if wanted else ["podman", "docker"]:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(f"no container engine: {wanted or 'podman or docker'} is not on PATH. Install podman "
                       "(Debian: apt-get install podman runc; see scripts/install-podman.sh) or docker, or set "
                       "COMPOSER_CONTAINER_ENGINE to the CLI's path")


def image(record: dict) -> str:
    """The instance image: the record's `image` field, else the official name swebench 4.1.0 derives."""
    if record.get("image"):
        return record["image"]
    return test_spec(record).instance_image_key


def test_spec(record: dict):
    """swebench's TestSpec of a Lite record (its eval script, test command and log parser key)."""
    from swebench.harness.test_spec.test_spec import make_test_spec
    return make_test_spec({k: v for k, v in record.items() if k != "image"}, namespace=NAMESPACE)


SCAN_ONLY_GRADING = "COMPOSER_GRADE_SCAN_ONLY"  # "1": grade instances whose tests pytest does not run (smoke runs)


def scan_only_refusal(record: dict, opt_in: bool = False) -> str | None:
    """Why a reward on this real instance must not be graded, or None. The canaries, the held-out probes and plain
    values all work through pytest (its plugin, its collection): an instance whose test command is another runner
    (django's runtests.py, sympy's bin/test, sphinx's tox) is graded by the tampering scan alone, and a submission
    that rewrites what its runner prints forges the reward. Fails closed: graded anyway only on an explicit opt-in
    (`opt_in`: EnvConfig.grade_scan_only; or COMPOSER_GRADE_SCAN_ONLY=1), which a report must say."""
    if not scan_only(record) or opt_in or os.environ.get(SCAN_ONLY_GRADING) == "1":
        return None
    return (f"refusing to grade {record['instance_id']}: its tests run under {_test_command(record).split()[0]!r}, "
            "not pytest, so grading runs the tampering scan alone (no canaries, held-out probes or plain values) and "
            "a submission could forge its reward. Use tasks whose tests pytest runs, or, for a run whose report says "
            f"so, opt in: {SCAN_ONLY_GRADING}=1 or EnvConfig(grade_scan_only=True)")


def probes_refusal(record: dict, opt_in: bool = False) -> str | None:
    """Why a reward on this real instance (one whose tests pytest runs, its image here) must not be graded, or None:
    it has no held-out probes (held_out: computed once per image and instance, then cached), so a submission that
    answers the visible tests' inputs, and only those, passes every other layer. Fails closed: graded anyway only on
    an explicit opt-in (`opt_in`: EnvConfig.grade_without_probes; or COMPOSER_GRADE_WITHOUT_PROBES=1)."""
    if opt_in or os.environ.get(probes.GRADE_WITHOUT) == "1":
        return None
    held = held_out(record)
    if held.probes:
        return None
    return probes.refusal_text(record["instance_id"], held.why, "004 and 002a drop the others, counted")


def scan_only(record: dict) -> bool:
    """Whether grading this real instance runs the tampering scan alone: its tests run without pytest."""
    return "pytest" not in _test_command(record)


def problems(record: dict | None = None) -> list[str]:
    """What stops a real instance from running here, in words (empty when nothing does)."""
    try:
        cli = engine()
    except RuntimeError as e:
        return [str(e)]
    broken = _engine_broken(cli)
    if broken:
        return [broken]
    if record is None:
        return []
    name = image(record)
    if subprocess.run([cli, "image", "inspect", name], capture_output=True).returncode != 0:
        return [f"the instance image {name} is not here: build it (scripts/swebench-image/build.sh "
                f"{record['instance_id']}) or pull it (`{Path(cli).name} pull docker.io/{name}`)"]
    return []


@functools.lru_cache(maxsize=None)
def _engine_broken(cli: str) -> str | None:
    """Why the engine cannot run containers (None: it can). Asked once per process: every episode's reset checks."""
    info = subprocess.run([cli, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return f"`{Path(cli).name} info` failed ({_last_line(info.stderr)}): the engine cannot run containers here"
    return None


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


class Container:
    """A running container from `image` (see the module doc); exec() runs commands in it, close() removes it."""

    def __init__(self, image_name: str, *, limits: Limits = Limits(), mounts: dict[Path, str] | None = None):
        self.cli = engine()
        self.name = f"composer-{uuid.uuid4().hex[:12]}"
        flags = ["--rm", "-i", "--name", self.name, "--label", f"{LABEL}=1", "--network", "none",
                 # root in the container keeps only its file permissions (images may hold other users' files)
                 "--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER",
                 "--security-opt", "no-new-privileges",
                 "--cpus", str(limits.cpus), "--memory", limits.memory, "--pids-limit", str(limits.pids),
                 "--ulimit", f"nofile={limits.open_files}:{limits.open_files}",
                 "--ulimit", f"nproc={limits.pids}:{limits.pids}", "--entrypoint", "/bin/sh"]
        for host, inside in (mounts or {}).items():
            flags += ["-v", f"{Path(host).resolve()}:{inside}"]
        # The main process says it is up, then waits for the end of its stdin: our pipe (see the module doc).
        self._proc = subprocess.Popen([self.cli, "run", *flags, image_name, "-c", "echo up; exec cat >/dev/null"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = _readline(self._proc.stdout, START_TIMEOUT_S)
        if line.strip() != b"up":
            self.close()
            err = self._proc.stderr.read().decode(errors="replace") if self._proc.poll() is not None else ""
            raise RuntimeError(f"container from {image_name} did not start: {_last_line(err)}")

    def exec(self, command: str, *, timeout_s: float, input: bytes | None = None, env: dict | None = None,
             workdir: str = "/testbed", user: str | None = None) -> tuple[int, str, bool]:
        """(exit status, stdout and stderr together, timed out) of `bash -c command` in the container, as root or
        as `user` ("uid:gid": no capabilities at all then). A command past timeout_s is killed inside the container
        (by `timeout`) and the call returns; of its output only the last MAX_OUTPUT bytes leave the container (where
        the summaries are; a flood cannot fill this process)."""
        argv = [self.cli, "exec", *(["-i"] if input is not None else []), "-w", workdir,
                *(["--user", user] if user else [])]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        bounded = f"timeout -s KILL {max(1, int(timeout_s))} /bin/bash -c {shlex.quote(command)} 2>&1"
        argv += [self.name, "/bin/bash", "-c", f"set -o pipefail; {bounded} | tail -c {MAX_OUTPUT}"]
        start = time.monotonic()
        try:
            done = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout_s + 30)
        except subprocess.TimeoutExpired as e:  # the engine itself hung: give up on this container
            self.close()
            return -9, (e.stdout or b"").decode(errors="replace"), True
        # 137 is also the status of a process the memory limit killed: only a kill at the deadline is a timeout
        timed_out = done.returncode == 137 and time.monotonic() - start >= timeout_s - 1
        return done.returncode, done.stdout.decode(errors="replace"), timed_out

    def read(self, path: str, *, limit: int | None = None) -> bytes | None:
        """A regular file's bytes, its first `limit` at most (None: absent, or not a regular file). Without a limit,
        a file too large to come out whole (past MAX_OUTPUT, which keeps an output's end) is an error, not its end."""
        q = shlex.quote(path)
        head = f"head -c {int(limit)} {q}" if limit is not None else f"cat {q}"
        rc, out, _ = self.exec(f"if [ -f {q} ] && [ ! -L {q} ]; then set -o pipefail; {head} | base64 -w0; "
                               "else exit 3; fi", timeout_s=60, workdir="/")
        if rc == 3:
            return None
        if rc != 0:
            raise RuntimeError(f"could not read {path} in container {self.name}: {out.strip()[-300:]}")
        if len(out) >= MAX_OUTPUT:
            raise RuntimeError(f"could not read {path} in container {self.name}: longer than the "
                               f"{MAX_OUTPUT * 3 // 4:,} bytes a read brings out whole; read it with a limit")
        return base64.b64decode(out)

    def write(self, path: str, data: bytes) -> None:
        rc, out, _ = self.exec(f"cat > {shlex.quote(path)}", timeout_s=60, input=data, workdir="/")
        if rc != 0:
            raise RuntimeError(f"could not write {path} in container {self.name}: {out.strip()[-300:]}")

    def copy_out(self, tar_command: str, dest: Path) -> None:
        """Extract into `dest` the tar archive that `tar_command` (bash, in the container) writes to its stdout."""
        tar = subprocess.Popen([self.cli, "exec", self.name, "/bin/bash", "-c", tar_command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        with tarfile.open(fileobj=tar.stdout, mode="r|") as archive:
            # tarfile's "tar" filter where Python has it; Debian 12's 3.11.2 has not, so the check is ours too
            archive.extractall(dest, members=inside(archive, dest),
                               **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        if tar.wait() != 0:
            raise RuntimeError(f"could not copy out of {self.name}: {_last_line(tar.stderr.read().decode())}")

    def close(self) -> None:
        """Remove the container now (idempotent)."""
        if self._proc.poll() is None:
            self._proc.stdin.close()  # cat ends, the container stops; --rm removes it
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                subprocess.run([self.cli, "rm", "-f", self.name], capture_output=True, timeout=60)
                self._proc.kill()
                self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _readline(stream, timeout_s: float) -> bytes:
    """One line from a pipe, or b"" after timeout_s."""
    out = []
    reader = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else b""


def inside(archive: tarfile.TarFile, dest: Path):
    """The archive's members, refusing any that would land outside `dest` or is a device: an absolute name or a
    `..` that climbs out, a link whose target resolves outside it."""
    root = os.path.realpath(dest)

    def within(path: str) -> bool:
        return os.path.commonpath([root, os.path.normpath(os.path.join(root, path))]) == root

    for member in archive:
        target = (os.path.join(os.path.dirname(member.name), member.linkname) if member.issym()
                  else member.linkname if member.islnk() else member.name)
        if member.name.startswith("/") or not within(member.name) or not within(target) or member.isdev():
            raise RuntimeError(f"refusing {member.name!r} (-> {member.linkname!r}) from an instance's /testbed: it "
                               f"would land outside {dest}")
        yield member


class Workspace:
    """An episode on a real instance: the image's /testbed copied to `dest` (a new folder) and mounted back."""

    def __init__(self, record: dict, dest: Path, *, limits: Limits = Limits()):
        self.record, self.repo, self.spec = record, Path(dest), test_spec(record)
        name = image(record)
        self.repo.mkdir(parents=True)
        with Container(name, limits=limits) as source:  # the pristine tree, without .git, onto the host
            source.copy_out("tar -C /testbed --exclude=./.git -cf - .", self.repo)
        self.container = Container(name, limits=limits, mounts={self.repo: "/testbed"})

    def run_tests(self, test_ids: list[str], *, timeout_s: float) -> sandbox.TestRun:
        """The spec's test command (pytest -rA ... for pytest repos) on test_ids, or on the whole suite when empty;
        outcomes from the harness's log parser for the repo."""
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
        start = time.monotonic()
        test_cmd = MAP_REPO_VERSION_TO_SPECS[self.record["repo"]][self.record["version"]]["test_cmd"]
        command = f"{ACTIVATE} && {test_cmd} {' '.join(map(shlex.quote, test_ids))}"
        # nothing of the run's own in the agent's files (its diff): no bytecode, no .pytest_cache
        rc, output, timed_out = self.container.exec(command, timeout_s=timeout_s, env={
            "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": "-p no:cacheprovider"})
        status = MAP_REPO_TO_PARSER[self.record["repo"]](output, self.spec)
        passed = {t: s in ("PASSED", "XFAIL") for t, s in status.items()}
        outcomes = {t: passed.get(t, False) for t in test_ids} if test_ids else passed
        error = f"tests timed out after {timeout_s:.0f} s" if timed_out else \
            None if status else f"no test ran (exit status {rc})"
        return sandbox.TestRun(outcomes=outcomes, output=output[-20_000:], timed_out=timed_out, returncode=rc,
                               duration_s=time.monotonic() - start, error=error)

    def close(self) -> None:
        self.container.close()


ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed && cd /testbed"
RUN_USER = "65534:65534"  # nobody: a grading's test run (see READ_ONLY)


# the layers a grading can run without: to measure one (bench env) or show what it catches (the tests), never to train
SWITCHABLE = ("probes", "plain_values", "read_only")


def grade(prediction: dict, record: dict, *, timeout_s: float, flag_tampering: bool = True,
          limits: Limits = Limits(), off: tuple[str, ...] = ()) -> dict:
    """The harness's report for one prediction (patch_is_None, patch_exists, patch_successfully_applied, resolved,
    tests_status), `error`, `tampering` ({"flagged": [...], "review": [...], "forged": [...]}, and for pytest
    instances "missed": [...]), `layers` (every grading layer of composer.env.defences.layers: "on", or why not;
    once the tests ran) and for pytest instances `probes` ({"total", "missed"}), from a fresh container. `off`: layers
    of SWITCHABLE to grade without, to measure one or show what it catches.

    As the harness does it (see the module doc), with these additions: the changed source files are scanned
    (composer.env.defences.layers.scan; a patch with decisive findings is not run when flag_tampering), and where the
    test command is pytest, the canaries (composer.env.defences.canaries; the tests renamed alike) and the instance's
    held-out probes (held_out) are planted in the test files after the test patch, and the tests run with plain values
    (GRADING_PLUGIN), as a uid that cannot change the repository's files (READ_ONLY). A canary with the wrong
    outcome or a probe without the gold patch's outcome means not resolved."""
    from swebench.harness.constants import END_TEST_OUTPUT
    spec = test_spec(record)
    patch = prediction["model_patch"] or ""
    report = {"patch_is_None": prediction["model_patch"] is None, "patch_exists": bool(patch),
              "patch_successfully_applied": False, "resolved": False, "error": None,
              "tampering": {"flagged": [], "review": [], "forged": []}}
    script = spec.eval_script_list
    env, start, end = _eval_parts(script)
    test_ids = [*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS]
    pytest = not scan_only(record)
    if unknown := sorted(set(off) - set(SWITCHABLE)):
        raise ValueError(f"grade(off={unknown}): a grading runs without {list(SWITCHABLE)} only")
    held = held_out(record, limits=limits) if pytest and "probes" not in off else None
    with Container(image(record), limits=limits) as box:
        before, error = _apply(box, patch)
        if error:
            report["error"] = error
            return report
        after = {p: box.read(f"/testbed/{p}", limit=layers.SCAN_LIMIT + 1) for p in before}
        report["tampering"].update(layers.scan(before, after, patches.diff_paths(record["test_patch"])))
        if report["tampering"]["flagged"] and flag_tampering:
            return {**report, "error": "not run: the patch tampers with the test run (tampering['flagged'])"}
        box.write("/eval_setup.sh", _script(script[:start]))
        rc, output, timed_out = box.exec("/bin/bash /eval_setup.sh", timeout_s=timeout_s, workdir="/")
        planted, mine, load, log, recorded = None, {}, [], None, {}
        if not timed_out and pytest:
            rng = random.Random(secrets.randbits(64))
            texts = {f: box.read(f"/testbed/{f}") for f in dict.fromkeys(t.split("::")[0] for t in test_ids)}
            planted = canaries.plant({f: b.decode("utf-8", "surrogateescape") for f, b in texts.items() if b},
                                     spec.FAIL_TO_PASS, spec.PASS_TO_PASS, rng)
            for f, text in planted.files.items():
                text, here = real_probes.plant(text, [p for p in held.probes if p.file == f] if held else [], rng)
                mine.update(here)
                box.write(f"/testbed/{f}", text.encode("utf-8", "surrogateescape"))
            load, log = _plugin(box, _base_classes(box, before) if "plain_values" not in off else None, list(before))
        if not timed_out:
            # the eval script's tests, not the test files' reset after them (for a container the harness keeps)
            rc, run_output, timed_out = _run(box, env + load + script[start:end + 1], timeout_s=timeout_s,
                                             read_only=pytest and "read_only" not in off)
            output += run_output
            recorded = real_probes.recorded(_read_log(box, log)) if mine else {}
    if timed_out:
        report.update(patch_successfully_applied=True, error=f"tests timed out after {timeout_s:.0f} s")
        return report
    if END_TEST_OUTPUT not in output:
        report["error"] = f"the eval script stopped before its tests ended: {_last_line(output)}"
        return report
    graded, report["tampering"]["forged"] = _graded(spec, record, output, planted)
    if not pytest:
        off = "off: the test command is not pytest (scan only)"
        report["layers"] = layers.statuses(canaries=off, probes=off, plain_values=off, read_only=off)
        return {**report, **graded}
    missed = real_probes.missed(mine, recorded)
    report["probes"] = {"total": len(mine), "missed": len(missed)}
    report["tampering"]["missed"] = missed
    report["layers"] = layers.statuses(
        probes="off" if held is None else f"none: {held.why}" if held.why else "on",
        plain_values="off" if "plain_values" in off else next(
            ("off: " + line.split(PLAIN_OFF, 1)[1] for line in output.splitlines() if line.startswith(PLAIN_OFF)),
            "on"),
        read_only="off" if "read_only" in off else "on")
    return {**report, **graded, **({"resolved": False} if missed else {})}


# Every file of /testbed but .git with what a write changes, one a line; a name holding a newline reads as two
# names, neither of them one the diff gave: refused too.
TREE = r"find /testbed -path /testbed/.git -prune -o ! -type d -printf '%P\t%y %m %s %T@ %C@ %i\n' | LC_ALL=C sort"


def _tree(box: Container) -> dict[str, str]:
    rc, out, _ = box.exec(f"{TREE} > /tmp/tree.txt && base64 -w0 /tmp/tree.txt", timeout_s=300, workdir="/")
    if rc != 0:
        raise RuntimeError(f"could not list /testbed in {box.name}: {out.strip()[-300:]}")
    lines = base64.b64decode(out).decode("utf-8", "surrogateescape").splitlines()
    return dict(line.rsplit("\t", 1) if "\t" in line else (line, "") for line in lines)


def _apply(box: Container, patch: str) -> tuple[dict[str, bytes | None], str | None]:
    """Apply a patch to /testbed the way the harness does (its GIT_APPLY_CMDS, in turn): ({each file it changed on
    disk: its bytes before, None where absent}, None), or the second item says why it did not apply or is refused: a
    name the patch tool reads otherwise than grading (patches.check_names), or a file written under a name no header
    gives."""
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS
    named = patches.diff_paths(patch) if patch.strip() else []
    try:
        patches.check_names(named)
    except patches.PatchError as e:
        return {}, f"patch refused: {e}"
    before = {p: box.read(f"/testbed/{p}", limit=layers.SCAN_LIMIT + 1) for p in named}  # what the scan reads
    box.write("/tmp/patch.diff", patch.encode())
    listed = _tree(box)
    for apply in GIT_APPLY_CMDS:
        rc, applied, _ = box.exec(f"{apply} /tmp/patch.diff", timeout_s=120)
        if rc == 0:
            written = patches.changed(listed, _tree(box))
            # the harness's `git apply --reject` leaves *.rej files, and patch with fuzz *.orig backups, of named files
            written = [p for p in written if p in named or p.removesuffix(".rej").removesuffix(".orig") not in named]
            if unnamed := sorted(set(written) - set(named)):
                return {}, f"patch refused: the patch tool wrote {unnamed[:5]}, which no header of the diff names"
            return {p: before[p] for p in written}, None
    return before, f"patch did not apply: {applied.strip()[-500:]}"


# Run as root before a grading's tests, which then run as RUN_USER (no capabilities): every file of /testbed is
# root's and not writable by others (the image's, the patch's, the test patch's, the planted test files), and
# every folder root's, sticky and open to all: the run may add files anywhere (real suites write into their own
# folders) and change what it added, but it cannot rewrite, delete or rename a file it did not make, so code run by
# the tests cannot change the graded test files, their helpers or a conftest.py not yet loaded. The bytecode
# folders are root's and closed, made where missing: a forged .pyc beside a test module pytest has not imported
# yet would stand in for it (pytest trusts a cached .pyc whose recorded source size and time match). .git stays
# root's too (it is root's already; nothing of the tests needs to write it). All of it changes metadata only: the
# overlay copies no file's data.
READ_ONLY = r"""set -e
cd /testbed
find . -path ./.git -prune -o ! -user root -exec chown -h root:root {} +
find . -path ./.git -prune -o -type f -perm /022 -exec chmod go-w {} +
find . -path ./.git -prune -o -name '*.py' -printf '%h/__pycache__\0' | sort -zu | xargs -0r mkdir -p
find . -path ./.git -prune -o -type d -name __pycache__ -exec chmod 0755 {} + -o -type d -exec chmod 1777 {} +
"""


def _run(box: Container, lines: list[str], *, timeout_s: float, read_only: bool) -> tuple[int, str, bool]:
    """(exit status, output, timed out) of a bash script of `lines` in /testbed: as RUN_USER after READ_ONLY
    (its HOME a fresh folder of its own), or as root."""
    if read_only:
        rc, out, _ = box.exec(READ_ONLY, timeout_s=600, workdir="/")
        if rc != 0:
            raise RuntimeError(f"could not make /testbed read-only in {box.name}: {out.strip()[-300:]}")
        lines = ['export HOME="$(mktemp -d)"', *lines]
    box.write("/eval_run.sh", _script(lines))
    return box.exec("/bin/bash /eval_run.sh", timeout_s=timeout_s, workdir="/", user=RUN_USER if read_only else None)


# Loaded with -p by every grading run of a pytest instance. It writes each test call's recorded properties (the
# probes' outcomes: composer.env.defences.real_probes) to a log that grading reads after the run, and it makes the
# values the tests compare plain (composer/env/containment/plain_values.py), as the sandbox's outcome plugin does for
# embedded tasks; the outcomes still come from the harness's log parser. The base's classes come in a file (a large
# repository's list is past what one environment variable may hold). Where the image's Python cannot import the
# plain-values module (it is imported before any code of the repository runs, so only the image decides that), the run
# goes on without that layer and says so (PLAIN_OFF), and grading reports it off: an image's Python must not fail an
# honest fix. Plain values load on every pytest instance, not only where the syntax scan
# (composer.env.defences.tampering) named something, which is how it was: a layer that a word list gates is skipped by
# an attack the list misses. On real libraries' own suites the wrapping changes a few honest outcomes (one of flask's
# 482, one of xarray's 218 tests) and slows a whole suite 2-6x (docs/sandbox.md); on the shipped marshmallow instance it
# changes none and costs well under a second a grading (bench env).
PLAIN_OFF = "composer: plain values off: "
GRADING_PLUGIN = """import importlib, json, os, sys

_LOG = os.environ.pop("COMPOSER_PROBE_LOG")
_PLAIN = None
if "COMPOSER_PLAIN_MODULE" in os.environ:
    try:
        with open(os.environ.pop("COMPOSER_PLAIN_KNOWN_FILE")) as _f:
            os.environ["COMPOSER_SANDBOX_KNOWN_CLASSES"] = _f.read()
        _PLAIN = importlib.import_module(os.environ.pop("COMPOSER_PLAIN_MODULE"))
    except Exception as e:
        sys.stderr.write("%s%s: %s\\n" % (""" + repr(PLAIN_OFF) + """, type(e).__name__, str(e)[:200]))


def pytest_collection_modifyitems(config, items):
    if _PLAIN is not None:
        _PLAIN.guard_modules()


def pytest_runtest_setup(item):
    if _PLAIN is not None:
        _PLAIN.guard_modules()


def pytest_runtest_logreport(report):
    if report.when == "call" and report.user_properties:
        with open(_LOG, "a") as f:
            f.write(json.dumps([report.nodeid, dict(report.user_properties)], default=repr) + "\\n")
"""
MAX_LOG = 1 << 20  # bytes of the plugin's log read back (the run's uid can write it)


def _base_classes(box: Container, before: dict[str, bytes | None]) -> list[str]:
    """composer.env.defences.grading.defined_classes of the container's /testbed with the patch's files as they were
    before it (`before`: path -> bytes, None where the patch made the file): the base commit's classes, and the
    tests'."""
    with tempfile.TemporaryDirectory(prefix="composer-base-") as tmp:
        root = Path(tmp).resolve()
        box.copy_out("cd /testbed && find . -name '*.py' -not -path './.git/*' -print0 | tar --null -T - -cf -", root)
        for path, text in before.items():
            target = (root / path).resolve()
            if not path.endswith(".py") or not target.is_relative_to(root):  # a diff's path is the agent's
                continue
            if text is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(text)
        return grading.defined_classes(root)


def _plugin(box: Container, known: list[str] | None, changed: list[str]) -> tuple[list[str], str]:
    """Write GRADING_PLUGIN (and, unless `known` is None, the plain-values module, the base's classes and the paths
    the patch changed) into the container under names of this grading's own (nothing of the repository's can shadow
    them), in a folder root's and closed to the run; (the run script's lines that load it, the path of its log: the
    run's uid may write it)."""
    suffix = secrets.token_hex(6)
    folder, plugin, module = f"/tmp/composer-grading-{suffix}", f"_composer_grading_plugin_{suffix}", \
        f"{sandbox.PLAIN_NAME}_{suffix}"
    log = f"{folder}/probes.log"
    rc, out, _ = box.exec(f"mkdir -m 0755 {folder} && touch {log} && chown {RUN_USER} {log}", timeout_s=60,
                          workdir="/")
    if rc != 0:
        raise RuntimeError(f"could not make the grading plugin's folder in {box.name}: {out.strip()[-300:]}")
    box.write(f"{folder}/{plugin}.py", GRADING_PLUGIN.encode())
    lines = [f'export PYTHONPATH={folder}${{PYTHONPATH:+:$PYTHONPATH}}',
             f'export PYTEST_ADDOPTS="-p {plugin}${{PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}}"',
             f"export COMPOSER_PROBE_LOG={log}"]
    if known is not None:
        box.write(f"{folder}/{module}.py", sandbox.PLAIN_VALUES.encode())
        box.write(f"{folder}/known.json", json.dumps(sorted(known)).encode())
        lines.append(f"export COMPOSER_PLAIN_KNOWN_FILE={folder}/known.json COMPOSER_PLAIN_MODULE={module} "
                     f"COMPOSER_SANDBOX_CHANGED={shlex.quote(json.dumps(sorted(changed)))}")
    return lines, log


def _read_log(box: Container, log: str) -> str:
    """The first MAX_LOG bytes of the plugin's log (what the run wrote; bounded, since its uid can write it)."""
    rc, out, _ = box.exec(f"head -c {MAX_LOG} {shlex.quote(log)}", timeout_s=60, workdir="/")
    return out if rc == 0 else ""


def held_out(record: dict, *, limits: Limits = Limits()) -> real_probes.Held:
    """The instance's held-out probes (composer.env.defences.real_probes), from the composer cache (COMPOSER_CACHE;
    never where a policy's code can write), keyed by the image's id, the instance's id and record and
    real_probes.VERSION, or computed (compute_probes) and cached there. A computation that an error stopped (the
    gold patch or the test patch not applying, a container that did not start) is not cached, and the instance
    gets no probes that time, saying why."""
    cli = engine()
    inspect = subprocess.run([cli, "image", "inspect", "--format", "{{.Id}}", image(record)], capture_output=True,
                             text=True, timeout=60)
    if inspect.returncode != 0:
        raise RuntimeError(f"could not inspect {image(record)}: {_last_line(inspect.stderr)}")
    key = files.config_hash(image=inspect.stdout.strip(), instance=record["instance_id"],
                            record={k: record[k] for k in ("patch", "test_patch", "FAIL_TO_PASS", "version")},
                            version=real_probes.VERSION)
    target = Path(os.environ.get("COMPOSER_CACHE", paths.CACHE)) / "real-probes" / key
    try:
        folder = files.publish(target, lambda tmp: (tmp / "probes.json").write_text(
            real_probes.dumps(compute_probes(record, limits=limits))))
    except RuntimeError as e:  # ProbesUnfinished, or a container that did not start
        return real_probes.Held((), f"not computed: {e}", 0, 0.0)
    return real_probes.loads((folder / "probes.json").read_text())


class ProbesUnfinished(RuntimeError):
    """An error stopped the computation of an instance's probes (nothing is cached)."""


def compute_probes(record: dict, *, limits: Limits = Limits()) -> real_probes.Held:
    """The instance's probes computed afresh (held_out caches them): the candidates of its FAIL_TO_PASS tests
    (real_probes.candidates, drawn with a generator seeded by the instance's id, at most real_probes.MAX_CANDIDATES)
    planted in the test files after the test patch and run as grading runs its tests (GRADING_PLUGIN, READ_ONLY),
    in a fresh container for the base commit (once) and one for the gold patch (twice). Kept: those whose gold
    outcome is the same both times and comparable (a literal or a raise) and the base's another or none (a run cut
    at real_probes.TIMEOUT_S gives none for the probes it did not reach); up to probes.PER_TASK of them."""
    begin = time.monotonic()
    if scan_only(record):
        return real_probes.Held((), "the test command is not pytest", 0, 0.0)
    spec = test_spec(record)
    script = spec.eval_script_list
    env, start, _ = _eval_parts(script)
    rng = random.Random(hashlib.sha256(record["instance_id"].encode()).digest())
    planted, outcomes = None, {}
    for side, patch, runs in (("base", "", 1), ("gold", record["patch"], 2)):
        with Container(image(record), limits=limits) as box:
            before, error = _apply(box, patch) if patch else ({}, None)
            if error:
                raise ProbesUnfinished(f"the gold patch: {error}")
            box.write("/eval_setup.sh", _script(script[:start]))
            rc, out, timed_out = box.exec("/bin/bash /eval_setup.sh", timeout_s=real_probes.TIMEOUT_S, workdir="/")
            if rc != 0 or timed_out:
                raise ProbesUnfinished(f"the eval script's setup on the {side} failed: {_last_line(out)}")
            if planted is None:  # the test files are the same on both sides: the base's, the test patch applied
                texts = {f: (box.read(f"/testbed/{f}") or b"").decode("utf-8", "surrogateescape")
                         for f in dict.fromkeys(t.split("::")[0] for t in spec.FAIL_TO_PASS)}
                made = [c for tid in spec.FAIL_TO_PASS for c in real_probes.candidates(texts[tid.split("::")[0]],
                                                                                        tid, rng)]
                if len(made) > real_probes.MAX_CANDIDATES:
                    made = rng.sample(made, real_probes.MAX_CANDIDATES)
                if not made:
                    return real_probes.Held((), "no FAIL_TO_PASS test calls something with a literal input to move "
                                                "(or each is parametrized or decorated)", 0,
                                            time.monotonic() - begin)
                planted = {f: real_probes.plant(text, [c for c in made if c.file == f], rng)
                           for f, text in texts.items()}
            for f, (text, _) in planted.items():
                box.write(f"/testbed/{f}", text.encode("utf-8", "surrogateescape"))
            load, log = _plugin(box, _base_classes(box, before), list(before))
            ids = [f"{p.file}::{p.cls + '::' if p.cls else ''}{name}" for _, named in planted.values()
                   for name, p in named.items()]
            command = f"{_test_command(record)} {' '.join(map(shlex.quote, ids))}"
            outcomes[side] = []
            for _ in range(runs):
                box.exec(f": > {log}", timeout_s=60, workdir="/")
                _run(box, env + load + [command], timeout_s=real_probes.TIMEOUT_S, read_only=True)
                outcomes[side].append(real_probes.recorded(_read_log(box, log)))
    kept = []
    for name, probe in ((n, p) for _, named in planted.values() for n, p in named.items()):
        gold = [run.get(name, []) for run in outcomes["gold"]]
        if len(gold[0]) != 1 or not real_probes.comparable(gold[0][0]):
            continue
        probe = replace(probe, expected=gold[0][0])
        base = outcomes["base"][0].get(name, [])
        if len(gold[1]) == 1 and real_probes.matches(probe, gold[1][0]) and not (
                len(base) == 1 and real_probes.matches(probe, base[0])):
            kept.append(probe)
    rng.shuffle(kept)
    return real_probes.Held(tuple(kept[:probes.PER_TASK]), None if kept else
                            "no moved input shows the bug (the base gives the gold patch's outcome, or the gold "
                            "patch's is not a literal)", len(ids), time.monotonic() - begin)


def _eval_parts(script: list[str]) -> tuple[list[str], int, int]:
    """Of the harness's eval script (its lines): the lines that set up the shell (activate, cd, variables), and the
    indices of its start-of-tests and end-of-tests markers."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
    env = script[:next(i for i, c in enumerate(script) if c.startswith("git config"))]
    return env, script.index(f": '{START_TEST_OUTPUT}'"), script.index(f": '{END_TEST_OUTPUT}'")


def _script(commands: list[str]) -> bytes:
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *commands, ""]).encode()


def _test_command(record: dict) -> str:
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    command = MAP_REPO_VERSION_TO_SPECS[record["repo"]][record["version"]]["test_cmd"]
    return command[-1] if isinstance(command, list) else command


def _graded(spec, record: dict, output: str, planted) -> tuple[dict, list[str]]:
    """(the harness's report from the eval script's output, the task's tests read under the names they ran with;
    what the canaries say was forged)."""
    from swebench.harness.constants import FAIL_ONLY_REPOS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    with tempfile.TemporaryDirectory(prefix="composer-grade-") as tmp:
        log = Path(tmp) / "test_output.txt"
        log.write_text(output)
        status, found = get_logs_eval(spec, str(log))
    if not found:
        return {"error": f"the harness found no test output: {_last_line(output)}"}, []
    forged = []
    if planted is not None:
        passed = {t: s in ("PASSED", "XFAIL") for t, s in status.items()}
        _, forged, _ = planted.read(passed, missing=[t for t in planted.test_ids if t not in status])
        status = {old: status[new] for old, new in planted.renamed.items() if new in status}
    ref = {"instance_id": record["instance_id"], "FAIL_TO_PASS": spec.FAIL_TO_PASS, "PASS_TO_PASS": spec.PASS_TO_PASS}
    tests = get_eval_tests_report(status, ref, eval_type=EvalType.FAIL_ONLY if record["repo"] in FAIL_ONLY_REPOS
                                  else EvalType.PASS_AND_FAIL)
    resolved = get_resolution_status(tests) == ResolvedStatus.FULL.value and not forged
    return {"patch_successfully_applied": True, "resolved": resolved, "tests_status": tests, "error": None}, forged
