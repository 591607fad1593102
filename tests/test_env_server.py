"""The coding environment served by composer.env.server, driven by openenv's own GenericEnvClient over /ws.

    .venv/bin/pytest tests/test_env_server.py
"""

import json
import subprocess
import sys
import threading

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient

from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, gold_edits
from composer.env.server import serve_env


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0)


@pytest.fixture(scope="module")
def url(records):
    with serve_env(records, EnvConfig(max_steps=10, test_timeout_s=10)) as url:
        yield url


def client(url):
    return GenericEnvClient(base_url=url).sync()


def play(url, reset: dict, edits: list[dict]) -> list:
    """reset -> run_tests -> edits -> submit in one WebSocket session; the StepResults."""
    with client(url) as c:
        results = [c.reset(**reset), c.step({"tool": "run_tests", "args": {}})]
        results += [c.step({"tool": "edit", "args": e}) for e in edits]
        results.append(c.step({"tool": "submit"}))
        results.append(c.state())
    return results


def test_gold_fix_over_websocket_is_rewarded(url, records):
    record = records[0]
    f2p, p2p = json.loads(record["FAIL_TO_PASS"]), json.loads(record["PASS_TO_PASS"])
    first, tests, *edits, submit, state = play(url, {"instance": record}, gold_edits(record))
    assert record["problem_statement"].strip() in first.observation["text"] and not first.done
    assert tests.observation["info"]["tests"] == {**{t: False for t in f2p}, **{t: True for t in p2p}}
    assert all(e.observation["info"]["ok"] for e in edits)
    assert (submit.reward, submit.done) == (1.0, True)
    info = submit.observation["info"]
    assert info["tool"] == "submit" and info["ok"] and info["done"] and not info["truncated"]
    assert info["step"] == 2 + len(edits) and info["instance_id"] == record["instance_id"]
    assert info["tests"] == dict.fromkeys(f2p + p2p, True)
    assert state["submitted"] and state["reward"] == 1.0 and state["step_count"] == info["step"]


def test_concurrent_sessions_are_isolated(url, records):
    """Two sessions at once on the same task: the wrong fix gets 0.0 while the gold fix next to it gets 1.0."""
    record = records[1]
    gold = gold_edits(record)
    wrong = [{**gold[0], "end": gold[0]["start"] - 1, "new_text": "# looked here\n"}]
    results = {}
    threads = [threading.Thread(target=lambda k=k, e=e: results.__setitem__(k, play(url, {"instance_id": record[
        "instance_id"]}, e))) for k, e in (("gold", gold), ("wrong", wrong))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["gold"][-2].reward == 1.0 and results["wrong"][-2].reward == 0.0
    assert results["gold"][-1]["episode_id"] != results["wrong"][-1]["episode_id"]


def test_bad_calls_over_the_wire(url):
    with client(url) as c:
        c.reset(seed=0)
        obs = c.step({"tool": "view", "args": {"path": "../../etc/passwd"}}).observation
        assert not obs["info"]["ok"] and "escapes" in obs["info"]["error"] and obs["info"]["step"] == 1
        obs = c.step({"tool": "teleport", "args": {}}).observation
        assert "unknown tool" in obs["info"]["error"] and obs["info"]["step"] == 2
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # not a CodingAction at all: refused by openenv
            c.step({"args": "not an object"})
        assert c.step({"tool": "list_files"}).observation["info"]["step"] == 3  # the refused message was no step


def test_http_endpoints(url):
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"
    schema = httpx.get(f"{url}/schema").json()
    assert {"tool", "args"} <= set(schema["action"]["properties"])
    assert {"text", "info"} <= set(schema["observation"]["properties"])


def test_cli_serves_until_terminated(records, tmp_path):
    tasks.save_jsonl(records, tmp_path / "tasks.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "composer.env.server", "--tasks-file", str(tmp_path / "tasks.jsonl"),
                             "--port", "0", "--max-steps", "2"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving coding env at http://127.0.0.1:") and "(2 tasks" in line
        with client(line.split()[4]) as c:
            assert records[0]["instance_id"] in c.reset(instance_id=records[0]["instance_id"]).observation["info"][
                "instance_id"]
            c.step({"tool": "list_files"})
            last = c.step({"tool": "list_files"})
            assert last.done and last.observation["info"]["truncated"] and last.reward == 0.0
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
