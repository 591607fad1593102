"""composer.env.defences.real_probes: held-out probes derived from a real test suite's FAIL_TO_PASS tests, without a
container (tests/test_env_container.py runs them on the shipped Lite instance)."""

import json
import math
import os
import random
import subprocess
import sys
import textwrap

from composer.env.defences import real_probes
from composer.env.real import container

LIB = """def scale(xs, k):
    return [x * k for x in xs]


def parse(text):
    if not text.isdigit():
        raise ValueError(text)
    return int(text)
"""
TESTS = textwrap.dedent("""\
    import pytest

    from lib import parse, scale


    @pytest.fixture
    def factor():
        return 3


    def test_scale(factor):
        assert scale([1, 2], factor) == [3, 6]


    class TestParse:
        @pytest.fixture
        def prefix(self):
            return "4"

        def test_parse(self, prefix):
            text = prefix + "2"
            assert parse(text) == 42
            word = 'x7'
            with pytest.raises(ValueError):
                parse(word)


    @pytest.mark.parametrize("n", [1, 2])
    def test_parametrized(n):
        assert scale([n], 2) == [2 * n]


    def test_nothing_literal(factor):
        assert scale(factor * [1], factor) == [3, 3, 3]
    """)


def made(test_id: str, seed: int = 0) -> list[real_probes.Probe]:
    return real_probes.candidates(TESTS, test_id, random.Random(seed))


def test_candidates_move_one_literal_input_of_a_call_and_keep_the_tests_fixtures_and_class():
    top = made("tests/test_lib.py::test_scale")
    assert top and all(p.cls is None and p.args == ("factor",) and p.setup == () for p in top)
    assert all(p.expr.startswith("scale(") and p.expr.endswith(", factor)") and p.expr != "scale([1, 2], factor)"
               for p in top)  # the list literal moved, the fixture kept
    method = made("tests/test_lib.py::TestParse::test_parse")
    assert method and all(p.cls == "TestParse" and p.args == ("prefix",) for p in method)
    # `parse(text)` reads a name the setup computes (nothing to move); `parse(word)` reads a literal the setup
    # assigns: that one moves, the `with pytest.raises` block's call recorded
    assert {p.expr for p in method} == {"parse(word)"}
    assert all(p.setup[0] == "text = prefix + '2'" and p.setup[1].startswith("word = ") and p.setup[1] != "word = 'x7'"
               for p in method)
    assert made("tests/test_lib.py::test_parametrized") == []  # its argument would not carry over
    assert made("tests/test_lib.py::test_nothing_literal") == []
    assert made("tests/test_lib.py::test_scale") == made("tests/test_lib.py::test_scale")  # fixed by the generator


def test_planted_probes_record_the_value_or_the_raise_through_the_grading_plugin(tmp_path):
    """Planted among the tests (one at module level with a fixture, some as methods with the class's fixture) and
    run by pytest with the grading plugin: each records exactly one outcome, the value its moved call gives or the
    exception's class name, read back by name; the file's own tests still pass."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "lib.py").write_text(LIB)
    held = made("tests/test_lib.py::test_scale")[:2] + made("tests/test_lib.py::TestParse::test_parse")[:2]
    text, named = real_probes.plant(TESTS, held, random.Random(1))
    (tmp_path / "tests/test_lib.py").write_text(text)
    (tmp_path / "_grading_plugin.py").write_text(container.GRADING_PLUGIN)
    log = tmp_path / "probes.log"
    log.touch()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_grading_plugin", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "tests/test_lib.py"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path), "COMPOSER_PROBE_LOG": str(log)})
    assert run.returncode == 0, run.stdout[-3000:]
    values = real_probes.recorded(log.read_text())
    assert set(values) == set(named)
    namespace = {}
    exec(LIB, namespace)
    for name, probe in named.items():
        scope = {**namespace, "factor": 3, "prefix": "4"}
        exec("\n".join(probe.setup), scope)
        try:
            expected = repr(eval(probe.expr, scope))
        except Exception as e:
            expected = real_probes.RAISED + type(e).__name__
        assert values[name] == [expected]
    assert real_probes.missed({n: real_probes.Probe(**{**p.__dict__, "expected": values[n][0]})
                               for n, p in named.items()}, values) == []


def test_a_probe_is_missed_without_exactly_one_outcome_equal_to_the_gold_one():
    value = real_probes.Probe("t.py", None, (), (), "f(2)", "[2, 4.0]")
    raised = real_probes.Probe("t.py", "TestX", ("fx",), ("x = 1",), "g(x)", "raise ValueError")
    planted = {"test_a": value, "test_b": raised}
    assert real_probes.missed(planted, {"test_a": ["[2.0, 4]"], "test_b": ["raise ValueError"]}) == []  # ==
    for wrong in ({"test_a": ["[2, 5]"]}, {"test_a": ["[2, 4.0]", "[2, 4.0]"]}, {}, {"test_a": ["raise Exception"]}):
        assert len(real_probes.missed({"test_a": value}, wrong)) == 1
    assert real_probes.missed({"test_b": raised}, {"test_b": ["'raise ValueError'"]})  # a string is no raise
    assert real_probes.comparable("raise KeyError") and real_probes.comparable("{'a': (1, 2.5)}")
    assert not any(real_probes.comparable(v) for v in (repr(math.nan), "<object at 0x1>", "[nan]", None))
    log = json.dumps(["tests/t.py::TestX::test_b", {"value": "raise ValueError"}]) + "\nnot json\n[1]\n"
    assert real_probes.recorded(log) == {"test_b": ["raise ValueError"]}  # a mangled line counts for nothing
    held = real_probes.Held((value, raised), None, 9, 1.5)
    assert real_probes.loads(real_probes.dumps(held)) == held
    assert real_probes.source(raised, "test_q").startswith("def test_q(self, record_property, fx):\n    x = 1\n")
