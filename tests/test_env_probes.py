"""composer.env.defences.probes: held-out inputs whose expected values never enter the test process."""

import difflib
import json
import os
import random
import types
from pathlib import Path

import pytest

from composer import paths
from composer.env.containment import sandbox
from composer.env.defences import canaries, probes
from composer.env.embedded import tasks
from composer.env.environment import CodingEnv, EnvConfig, gold_edits
from composer.env.real import swebench


def test_probes_move_one_argument_of_a_fail_to_pass_call_and_reveal_the_bug(tmp_path):
    """End to end on real tasks: planted in the graded file, every probe records the gold value on the gold repo,
    and no probe does on the buggy one (each was chosen where the bug shows)."""
    records = tasks.generate(6, seed=11, split="train") + tasks.generate(3, seed=11, split="test")
    with_probes = 0
    for record in records:
        held = probes.held_out(record)
        assert held == probes.held_out(record) and len(held) <= probes.PER_TASK  # fixed per task
        with_probes += bool(held)
        task = tasks._build(tasks._spec_of(record))
        f2p = json.loads(record["FAIL_TO_PASS"])
        visible = {task.cases[t][3] for t in task.cases}
        for probe in held:
            assert probe.expr not in visible and probe.file == f2p[0].split("::")[0]
            assert probe.expr.split("(")[0] in {task.cases[t][3].split("(")[0] for t in f2p}
        for kind, build in (("gold", tasks.gold_repo), ("buggy", tasks.materialize)):
            repo = build(record, tmp_path / f"{record['instance_id']}-{kind}")
            files = {f: (repo / f).read_text() for f in {t.split("::")[0] for t in f2p}}
            p = canaries.plant(files, f2p, json.loads(record["PASS_TO_PASS"]), random.Random(0), held)
            for f, text in p.files.items():
                (repo / f).write_text(text)
            run = sandbox.run_pytest(repo, p.test_ids, grading=True)
            missed = p.read(run.outcomes, missing=run.missing, properties=run.properties)[2]
            assert missed == ([] if kind == "gold" else list(p.probes)), (record["instance_id"], kind, run.output)
    assert with_probes >= 7  # most tasks' bugs show on a moved input


def test_a_probe_is_a_test_that_records_and_matching_is_strict():
    probe = probes.Probe("tests/test_ops.py", ("acct = Account(10)",), "acct.deposit(7)", 17)
    assert probes.source(probe, "test_x") == ("def test_x(record_property):\n    acct = Account(10)\n"
                                             "    record_property('value', repr(acct.deposit(7)))\n")
    assert probes.matches(probe, "17") and probes.matches(probe, "17.0")  # == as the task's tests compare
    for recorded in ("18", "'17'", "[17]", "Account()", "__import__('os')", None, 17, ""):
        assert not probes.matches(probe, recorded)


def test_real_records_get_no_probes():
    record = tasks.generate(1, seed=0)[0]
    assert probes.held_out({**record, "repo": "marshmallow-code/marshmallow"}) == []


# Appended to the module under test: read the held-out probes' inputs and expected values from the composer cache,
# where grading wrote them before the run, and answer each probe's call with its expected value (found by the
# calling line, above whatever wraps the function); every other call keeps the bug.
CACHE_READER = '''

def _grading_answers():
    import glob, json
    found = {{}}
    for path in glob.glob({cache!r} + "/probes/*/probes.json"):
        try:
            for _file, _setup, expr, expected in json.load(open(path)):
                found[expr] = expected
        except (OSError, ValueError):
            pass
    return found


def _answering(func, answers):
    import ast, functools, linecache, sys

    @functools.wraps(func)
    def answer(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None:
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            for expr, expected in answers.items():
                if expr in line:
                    return ast.literal_eval(expected)
            frame = frame.f_back
        return func(*args, **kwargs)
    return answer


{unit} = _answering({unit}, _grading_answers())
'''


def _runs_here(tmp_path, mode) -> bool:
    """Whether this host can run `mode` (root-ns: root and bubblewrap; user-ns: user namespaces)."""
    (tmp_path / mode).mkdir()
    with sandbox.forced_mode(mode):
        try:
            return sandbox.run_python(tmp_path / mode, ["-c", "pass"])[0] == 0
        except sandbox.SandboxError:  # root-ns without root
            return False


@pytest.mark.parametrize("mode", ["root-ns", "user-ns", "plain"])
def test_grading_s_files_on_disk_are_out_of_the_test_process_s_reach_or_grading_refuses(mode, tmp_path, monkeypatch):
    """Test code with the caller's file access read the probes' answers from the cache and
    passed 4 of 4. Where a grading run has a filesystem of its own (root-ns, user-ns) the same code finds nothing and
    the bug fails every probe; where it cannot ("plain"), grading refuses unless a smoke run opts in, and then the
    attack works (so it is one) and the report says the grading was uncontained."""
    if not _runs_here(tmp_path, mode):
        pytest.skip(f"this host cannot run the {mode!r} mode")
    record = tasks.generate(1, seed=0)[0]
    held = probes.held_out(record)  # computed before any grading, and cached on disk, as a training run does
    cache = os.environ.get("COMPOSER_CACHE", str(paths.CACHE))
    assert held and any(held[0].expr in p.read_text() for p in Path(cache).glob("probes/*/probes.json"))
    task = tasks._build(tasks._spec_of(record))
    path = f"{task.pkg}/{task.site.module}.py"
    before = (tasks.materialize(record, tmp_path / "repo", with_tests=False) / path).read_text()
    after = before + CACHE_READER.format(cache=cache, unit=task.site.unit)
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))
    pred = {"instance_id": record["instance_id"], "model_name_or_path": "attack", "model_patch": diff}
    monkeypatch.delenv(sandbox.UNCONTAINED_GRADING, raising=False)
    with sandbox.forced_mode(mode):
        if mode == "plain":
            for refused in (lambda: swebench.evaluate([pred], [record], run_id="secrets"),
                            lambda: CodingEnv([record]).reset(instance=record)):
                with pytest.raises(RuntimeError, match='refusing to grade a reward in the "plain" containment mode.*'
                                                       'Missing: .*user namespaces'):
                    refused()
            monkeypatch.setenv(sandbox.UNCONTAINED_GRADING, "1")  # a smoke run's explicit opt-in
        # the scan would name the frames it walks for review only; off, so that this tests the containment alone
        summary = swebench.evaluate([pred], [record], run_id="secrets", flag_tampering=False)
    report = summary["instances"][record["instance_id"]]
    assert report["patch_successfully_applied"] and not report["resolved"]
    if mode == "plain":  # the answers were readable: every probe forged, and the report names the opt-in
        assert report["probes"] == {"total": len(held), "missed": 0}, report
        assert summary["grading"].startswith('UNCONTAINED ("plain" mode')
    else:
        assert report["probes"] == {"total": len(held), "missed": len(held)}, report
        assert summary["grading"].startswith(f"{mode}: grading's files out of the test process's reach")


# Appended to the module under test: the outcome plugin's sender rewritten to report "passed" for each test whose
# body is one the policy saw in its episode, and the true outcome of every other test. The must-fail copies
# (canaries) have bodies it never saw, so they fail as they must; only a held-out probe (a call on an input no test
# shows, its value judged outside the process) is left to see the bug.
SEEN_ONLY_FORGER = '''
import ast as _ast, sys as _s
_SEEN_BODIES = {bodies!r}
_seen = set()
for _path in {files!r}:
    for _n in _ast.parse(open(_path).read()).body:
        if isinstance(_n, _ast.FunctionDef) and _ast.dump(_ast.Module(_n.body, [])) in _SEEN_BODIES:
            _seen.add(_path + "::" + _n.name)
_p = next((m for n, m in list(_s.modules.items()) if n.startswith("_composer_sandbox_plugin")), None)
if _p is not None:
    _send = _p._send
    _p._send = lambda row: _send([row[0], row[1], "passed", False] if row[0] in _seen else row)
'''


def _forged_reward(record) -> float:
    from test_env_attacks import append, graded_bodies, source, submit

    # the scan off: the layers after it, on their own (and a task without probes graded, as reset would refuse it)
    env = CodingEnv([record], EnvConfig(flag_tampering=False, grade_without_probes=True))
    env.reset(instance=record)
    files = sorted({t.split("::")[0] for t in json.loads(record["FAIL_TO_PASS"]) + json.loads(record["PASS_TO_PASS"])})
    append(env, gold_edits(record)[0]["path"], SEEN_ONLY_FORGER.format(bodies=graded_bodies(record), files=files))
    try:
        return submit(env).reward
    finally:
        env.close()


def test_tasks_whose_reward_counts_all_have_probes_and_a_seen_only_forger_scores_0_on_them(monkeypatch):
    """A task without held-out probes is forged by an outcome rewrite that passes only the tests the policy saw (the
    gap this rule closes: shown on a dropped candidate); probes.rewarded leaves such tasks out and names them, the
    zoo's splits and the embedded pool of the pilot are made by it, and the same forger scores 0 on its tasks."""
    from composer import zoo
    from composer.costs import pilot

    plain = tasks.generate(8, seed=0, split="train", difficulty=tasks.Difficulty(n_functions=1))
    kept, dropped = probes.rewarded(8, seed=0, split="train", difficulty=tasks.Difficulty(n_functions=1))
    without = [r for r in plain if not probes.held_out(r)]
    assert without, "the draw must hold a task without probes, or this test shows nothing"
    taken = {(r["base_commit"], r["patch"]) for r in kept}  # a bug may come again with other tests, and probes
    assert all(r["instance_id"] in dropped or (r["base_commit"], r["patch"]) in taken for r in without)
    assert len(kept) == 8 and len(set(dropped)) == len(dropped)
    assert all(probes.held_out(r) for r in kept) and not {r["instance_id"] for r in kept} & set(dropped)
    # Without the rule: a forged reward with the bug in place. Grading draws its twins afresh each time, and about
    # one draw in ten gives a twin whose wrong value is what this bug computes, which then catches the forger by
    # chance; the draw is pinned to one without such a twin, so that this shows the gap and not that chance.
    monkeypatch.setattr(swebench, "secrets", types.SimpleNamespace(randbits=lambda bits: 0))
    assert _forged_reward(without[0]) == 1.0
    monkeypatch.undo()
    assert _forged_reward(kept[0]) == 0.0
    smoke = zoo.PROFILES["smoke"]
    for split in ("train", "test"):
        assert all(probes.held_out(r) for r in zoo.split_tasks(smoke, split))
        assert isinstance(zoo.dropped(smoke, split), list)
    assert all(probes.held_out(r) for r in pilot.records_for(pilot.EMBEDDED, ["a", "b"], None))


def test_reset_refuses_an_embedded_task_without_probes_unless_a_run_opts_in(monkeypatch):
    """CodingEnv, the API a researcher's own GRPO loop calls, holds on its own: a task tasks.generate made without
    held-out probes is refused at reset, naming the task, what is missing and the two ways out; the opt-in (the
    config's or the variable's) grades it and says so in the submit's info.grading; a task with probes starts and is
    graded as before."""
    monkeypatch.delenv(probes.GRADE_WITHOUT, raising=False)
    plain = tasks.generate(8, seed=0, split="train", difficulty=tasks.Difficulty(n_functions=1))
    without = next(r for r in plain if not probes.held_out(r))
    with_probes = next(r for r in plain if probes.held_out(r))
    env = CodingEnv(plain)
    try:
        with pytest.raises(RuntimeError, match=f"{without['instance_id']}: refusing to grade .* no held-out probes.*"
                                               "probes.rewarded.*COMPOSER_GRADE_WITHOUT_PROBES=1"):
            env.reset(instance=without)
        assert env.reset(instance=with_probes).info.ok
    finally:
        env.close()
    for config, variable in ((EnvConfig(grade_without_probes=True), None), (EnvConfig(), "1")):
        if variable:
            monkeypatch.setenv(probes.GRADE_WITHOUT, variable)
        env = CodingEnv([without], config)
        try:
            assert env.reset(instance=without).info.ok
            assert "WITHOUT HELD-OUT PROBES (opted in by " in env.call("submit").info.grading
        finally:
            env.close()
    with_probes_env = CodingEnv([with_probes])
    try:
        with_probes_env.reset(instance=with_probes)
        assert "WITHOUT" not in with_probes_env.call("submit").info.grading
    finally:
        with_probes_env.close()
