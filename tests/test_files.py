"""composer.files: atomic writes and content-addressed build folders.

    .venv/bin/pytest tests/test_files.py
"""

import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from composer import files


def test_publish_never_leaves_half_a_directory(tmp_path):
    target = tmp_path / "thing"

    def crash(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        files.publish(target, crash)
    assert list(tmp_path.iterdir()) == []

    def lose_race(tmp):  # a builder that does not take the lock publishes first
        (tmp / "mine").write_text("x")
        target.mkdir()
        (target / "theirs").write_text("y")

    assert files.publish(target, lose_race) == target
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert list(tmp_path.iterdir()) == [target]


def test_publish_builds_a_target_once_while_others_wait(tmp_path):
    """Three callers at once (threads: each opens the lock file itself, as a process would): one builds, the
    others wait for it and get its target."""
    target, builds = tmp_path / "model", []

    def build(tmp):
        builds.append(tmp)
        time.sleep(0.3)  # long enough that the other callers arrive while it builds
        (tmp / "weights").write_text("w")

    with ThreadPoolExecutor(3) as pool:
        paths = list(pool.map(lambda _: files.publish(target, build), range(3)))
    assert paths == [target] * 3 and len(builds) == 1 and (target / "weights").read_text() == "w"
    assert list(tmp_path.iterdir()) == [target]  # no lock file left behind


def test_write_atomic_replaces_the_inode_and_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    linked = tmp_path / "planted-hard-link"
    os.link(path, linked)
    files.write_atomic(path, "new\r\n")
    assert path.read_bytes() == b"new\r\n" and linked.read_text() == "old"  # not written through the link
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    files.write_atomic(path, b"\x00bytes", sync=True)
    assert path.read_bytes() == b"\x00bytes"

    class Unwritable(str):
        def encode(self, *args):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(path, Unwritable("x"))
    assert path.read_bytes() == b"\x00bytes" and sorted(p.name for p in tmp_path.iterdir()) == [
        "planted-hard-link", "report.json"]  # the old file whole, no temporary left


def test_config_hash_is_stable_and_order_free():
    assert files.config_hash(a=1, b=[2, 3]) == files.config_hash(b=[2, 3], a=1)
    assert len(files.config_hash(a=1)) == 16 and files.config_hash(a=1) != files.config_hash(a=2)
