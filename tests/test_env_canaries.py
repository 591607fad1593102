"""composer.env.defences.canaries: tests planted at grading whose outcomes must come out a certain way."""

import ast
import random
import textwrap

import pytest

from composer.env.containment import sandbox
from composer.env.defences import canaries
from composer.env.embedded import tasks

TEXT = textwrap.dedent("""\
    import pytest

    from calc.ops import mean, clamp


    def test_mean_1():
        assert mean([1, 2, 3]) == 2.0


    def test_mean_2():
        with pytest.raises(ValueError):
            mean([])


    def test_clamp_1():
        assert 5 == clamp(9, 0, 5)


    class TestClamp:
        def test_low(self):
            assert clamp(-1, 0, 5) == 0

        @pytest.mark.parametrize("x", [1, 2])
        def test_inside(self, x):
            assert clamp(x, 0, 5) == x
""")
F2P = ["tests/test_ops.py::test_mean_1", "tests/test_ops.py::TestClamp::test_low"]
P2P = ["tests/test_ops.py::test_mean_2", "tests/test_ops.py::test_clamp_1", "tests/test_ops.py::TestClamp::test_inside[1]"]
IDS = F2P + P2P


def planted(seed=0):
    return canaries.plant({"tests/test_ops.py": TEXT}, F2P, P2P, random.Random(seed))


def functions(text: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)}


def test_every_test_is_renamed_and_its_id_follows():
    p = planted()
    new = functions(p.files["tests/test_ops.py"])
    assert not {"test_mean_1", "test_mean_2", "test_clamp_1", "test_low", "test_inside"} & set(new)
    for old, renamed in p.renamed.items():
        assert renamed.split("::")[:-1] == old.split("::")[:-1]  # the same file and class
        name = renamed.split("::")[-1].split("[")[0]
        assert name in new and name.startswith("test_") and len(name) == 5 + canaries.NAME_LETTERS
    assert p.renamed["tests/test_ops.py::TestClamp::test_inside[1]"].endswith("[1]")
    assert set(p.test_ids) == set(p.renamed.values()) | set(p.canaries)


def test_names_differ_at_every_grading():
    assert planted(1).renamed != planted(2).renamed
    assert set(planted(1).canaries).isdisjoint(planted(2).canaries)


def test_canaries_are_twins_of_the_fail_to_pass_tests_and_one_pass_to_pass_test_and_one_must_pass():
    p = planted()
    new = functions(p.files["tests/test_ops.py"])
    must_fail = [(cid, copied) for cid, (must_pass, copied) in p.canaries.items() if not must_pass]
    assert sum(must_pass for must_pass, _ in p.canaries.values()) == canaries.MUST_PASS_PER_FILE
    # test_mean_1 (F2P, top-level, `== literal`) gets TWINS twins; test_clamp_1 (P2P, `literal ==`) one;
    # test_low is a method (no twin: it needs its class), test_mean_2 compares nothing
    assert sorted(copied for _, copied in must_fail) == ["tests/test_ops.py::test_clamp_1"] + \
        ["tests/test_ops.py::test_mean_1"] * canaries.TWINS
    for cid, copied in must_fail:
        canary, original = new[cid.split("::")[1]], functions(TEXT)[copied.split("::")[1]]
        c, o = canary.body[0].test, original.body[0].test
        assert ast.dump(c) != ast.dump(o)  # one literal changed, the call the same
        calls = [ast.dump(side) for side in (c.left, c.comparators[0]) if isinstance(side, ast.Call)]
        assert calls == [ast.dump(side) for side in (o.left, o.comparators[0]) if isinstance(side, ast.Call)]


def test_tests_and_canaries_are_reordered_after_the_files_other_code():
    orders = set()
    for seed in range(6):
        text = planted(seed).files["tests/test_ops.py"]
        tree = ast.parse(text)
        kinds = [type(n).__name__ for n in tree.body]
        last_other = max(i for i, n in enumerate(tree.body) if not isinstance(n, ast.FunctionDef))
        assert kinds[:3] == ["Import", "ImportFrom", "ClassDef"] and last_other == 2  # the tests come after
        orders.add(tuple(n.body[0].lineno for n in tree.body[3:]))
    assert len(orders) > 1
    # a file whose later code refers to a test keeps its order; the canaries go between its tests
    held = "def test_a():\n    assert f() == 1\n\n\ntest_a.slow = True\n\n\ndef test_b():\n    assert f() == 2\n"
    p = canaries.plant({"t/test_h.py": held}, ["t/test_h.py::test_a"], ["t/test_h.py::test_b"], random.Random(0))
    tree = ast.parse(p.files["t/test_h.py"])
    assert ast.unparse(tree.body[[ast.unparse(n).endswith(".slow = True") for n in tree.body].index(True) - 1]) \
        .startswith("def test_")  # the attribute still follows a test defined before it


def test_a_file_without_comparable_tests_gets_a_copy_with_a_false_ending():
    text = "def test_a():\n    x = [1]\n    assert x\n"
    p = canaries.plant({"t/test_a.py": text}, ["t/test_a.py::test_a"], [], random.Random(0))
    (cid, (must_pass, copied)), = [(c, v) for c, v in p.canaries.items() if not v[0]]
    assert copied is None
    body = functions(p.files["t/test_a.py"])[cid.split("::")[1]].body
    assert ast.unparse(body[0]) == "x = [1]" and isinstance(body[-1], ast.Assert)


@pytest.mark.parametrize("value", [0, 7, -3, 0.0, 2.5, 1e9, 1e300, "", "abc", "A1", b"xy", [], [1, 2], (1, "a"),
                                   {"a": 1}, {1, 2}, [[1, 2], [3]]])
def test_wrong_values_differ_keep_their_kind_and_are_symmetric(value):
    for seed in range(30):
        wrong = canaries.moved(value, random.Random(seed))
        assert wrong != value and type(wrong) is type(value)
        if isinstance(value, (int, float)):  # a step that does not scale with the value: either could be the original
            assert abs(wrong - value) <= 3 * max(1.0, abs(value) * 1e-9)
        if isinstance(value, str) and len(value) > 1:
            assert abs(len(wrong) - len(value)) <= 1
    assert canaries.moved(True, random.Random(0)) is None and canaries.moved(None, random.Random(0)) is None
    assert canaries.moved(float("nan"), random.Random(0)) is None


def test_read_maps_outcomes_back_and_says_what_was_forged():
    p = planted()
    fail = [c for c, (mp, _) in p.canaries.items() if not mp]
    ok = [c for c, (mp, _) in p.canaries.items() if mp]
    honest = {**{new: True for new in p.renamed.values()}, **{c: False for c in fail}, **{c: True for c in ok}}
    outcomes, forged, _ = p.read(honest)
    assert outcomes == {tid: True for tid in IDS} and forged == []
    outcomes, forged, _ = p.read({c: True for c in p.test_ids})  # everything passed
    assert len(forged) == len(fail) and all("must fail and passed" in f for f in forged)
    # a canary's value computed by a buggy but honest function: its copied test failed, so no forgery
    copied_failed = {**honest, fail[0]: True, p.renamed[p.canaries[fail[0]][1]]: False}
    assert p.read(copied_failed)[1] == []
    assert p.read({**honest, ok[0]: False})[1] == [f"outcomes forged: canary {ok[0]} must pass and failed"]
    # canaries that never ran while the task's tests of their file all did: a forger that reported those and quit
    quit_early = {new: True for new in p.renamed.values()}
    forged = p.read(quit_early, missing=[*fail, *ok])[1]
    assert len(forged) == len(fail) + len(ok) and all("gave no outcome" in f for f in forged)
    # but not when the run timed out, or when the task's tests did not all run either (a crash, a collection error)
    assert p.read(quit_early, missing=[*fail, *ok], timed_out=True)[1] == []
    assert p.read({}, missing=p.test_ids)[1] == []


def test_unparsable_files_and_unknown_ids_are_left_as_they_are():
    p = canaries.plant({"t/test_x.py": "def test_x(:\n"}, ["t/test_x.py::test_x"], ["t/test_y.py::test_y"],
                       random.Random(0))
    assert p.files == {"t/test_x.py": "def test_x(:\n"} and p.canaries == {}
    assert p.renamed == {"t/test_x.py::test_x": "t/test_x.py::test_x", "t/test_y.py::test_y": "t/test_y.py::test_y"}


def test_planted_tasks_give_the_same_outcomes_as_unplanted_ones_buggy_and_gold(tmp_path):
    """The honest runs: every graded test's outcome is what it was without canaries, and no canary says forged."""
    for record in tasks.generate(3, seed=5, split="test"):
        f2p, p2p = tasks.json.loads(record["FAIL_TO_PASS"]), tasks.json.loads(record["PASS_TO_PASS"])
        ids = f2p + p2p
        for kind, build in (("buggy", tasks.materialize), ("gold", tasks.gold_repo)):
            repo = build(record, tmp_path / f"{record['instance_id']}-{kind}")
            plain = sandbox.run_pytest(repo, ids).outcomes
            files = {f: (repo / f).read_text() for f in {t.split("::")[0] for t in ids}}
            p = canaries.plant(files, f2p, p2p, random.Random(0))
            for f, text in p.files.items():
                (repo / f).write_text(text)
            run = sandbox.run_pytest(repo, p.test_ids, grading=True)
            outcomes, forged, _ = p.read(run.outcomes, missing=run.missing, timed_out=run.timed_out)
            assert outcomes == plain and forged == [] and run.error is None
            assert all(plain.values()) == (kind == "gold")


def test_a_twin_keeps_its_tests_own_text_but_the_one_literal():
    """In a real repository a copy rewritten by ast.unparse would stand out by its quotes, comments and line
    breaks: a twin is the test's own source with only the compared literal's text replaced."""
    text = 'import x\n\n\ndef test_a():\n    # why\n    assert x.f(1) == "ab"  # note\n'
    p = canaries.plant({"t/test_a.py": text}, ["t/test_a.py::test_a"], [], random.Random(0))
    twins = [c.split("::")[1] for c, (must_pass, copied) in p.canaries.items() if copied]
    planted = p.files["t/test_a.py"]
    for name in twins:
        block = planted.split(f"def {name}():\n", 1)[1].split("\n\n", 1)[0]
        assert block.startswith("    # why\n    assert x.f(1) == \"") and block.endswith('"  # note')
        assert block != '    # why\n    assert x.f(1) == "ab"  # note'
