"""composer/env/containment/sandbox_plugin.py: in a grading run, rigged values do not pass and honest ones keep their
behaviour.

Each rigged case passes in an ordinary run (so the attack is real and the test can fail) and fails in a grading
run, wherever the comparison happens; each honest case passes in both.
"""

import textwrap

import pytest

from composer.env.containment import sandbox

CODE = '''
import collections
import enum


class _L(list):
    def __eq__(self, other):
        return True
    __hash__ = None


class _F(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__

    def __sub__(self, other):
        return 0.0
    __rsub__ = __sub__


class _S(str):
    __eq__ = lambda self, other: True
    __hash__ = str.__hash__


class _D(dict):
    def __missing__(self, key):
        return 1


class _Iter(list):
    def __iter__(self):
        return iter([1, 2, 3])

    def __len__(self):
        return 3


class _Reused(float):
    __eq__ = float.__ne__  # a builtin slot under another name
    __hash__ = float.__hash__


class Color(enum.IntEnum):
    RED = 1


class _Exact:  # a new class that equals exactly what the test expects
    def __eq__(self, other):
        return other == 1.0
    __hash__ = None


class _Posing(list):  # claims to be the library's: its module says json, and json has it
    def __eq__(self, other):
        return True
    __hash__ = None


_Posing.__module__ = "json"
import json as _json  # noqa: E402
_json._Posing = _Posing


class Point:  # a class of the base (known_classes) with comparisons of its own: left as it is
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x
    __hash__ = None


class Tag(str):
    pass


class Account:
    def __init__(self):
        self.balance = 0

    def deposit(self, n):
        self.balance = _F(n + 100)


def rigged_list():
    return _L([9])


def rigged_float():
    return _F(9.0)


def rigged_str():
    return _S("wrong")


def rigged_dict():
    return _D()


def rigged_iter():
    return _Iter([9])


def reused_slot():
    return _Reused(9.0)


def fill(xs):
    xs.append(_F(9.0))


def values():
    yield _F(9.0)


def nested():
    return {"a": [_F(9.0)], "b": (_S("x"),)}


def exact():
    return _Exact()


def posing():
    return _Posing([9])


def make_point(x):
    return Point(x)


def anything():
    from unittest import mock
    return mock.ANY


def point():
    return collections.namedtuple("P", "x y")(1, 2)


def color():
    return Color.RED


def counter():
    return collections.Counter("aab")


def ordered():
    return collections.OrderedDict(a=1)


def tag():
    return Tag("t")


def build(cls, *args):  # library code that makes what it is given: a test's own class comes back through it
    return cls(*args)


def echo(value):  # what a test hands the code comes back as it was (a test's mock)
    return value


class Config(dict):  # the base's own dict subclass, with behaviour of its own (flask's Config)
    def __repr__(self):
        return "<Config>"

    def section(self, name):
        return {k: v for k, v in self.items() if k.startswith(name)}


def config():
    return Config(db_host="h", db_port=1)


class Node:  # objects of the code under test that point at each other (a request context and its app)
    def __init__(self):
        self.peer = None

    def link(self, other):
        self.peer, other.peer = other, self
        return self


def marked():
    return 1


marked.hookimpl = True  # a decorator's mark on a function (pluggy's, jinja's pass_context)


def third():  # a value of a class a library defines, its module first imported by the code under test
    import fractions
    return fractions.Fraction(1, 3)


WROTE = []
try:
    with open("tests/planted.txt", "w") as f:
        f.write("x")
    WROTE.append(True)
except OSError:
    pass
'''

TESTS = '''
import unittest
import unittest.mock

import pytest

import pkg.code
from pkg.code import (Account, Color, Node, anything, build, color, config, counter, echo, exact, fill, make_point,
                      nested, ordered, point, posing, reused_slot, rigged_dict, rigged_float, rigged_iter, rigged_list,
                      rigged_str, tag, third, values, WROTE)


class Money:  # a test module's own class, with comparisons of its own (real suites define many)
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Money) and other.n == self.n
    __hash__ = None


def check(a, b):
    assert a == b


def test_rigged_list():
    assert rigged_list() == [1]


def test_rigged_in_a_helper():
    check(rigged_float(), 1.0)


def test_rigged_approx():
    assert rigged_float() == pytest.approx(1.0)


def test_rigged_unittest():
    unittest.TestCase().assertEqual(rigged_float(), 1.0)


def test_rigged_str():
    assert rigged_str() == "expected"


def test_rigged_sorted():
    assert sorted(rigged_iter()) == [1, 2, 3]


def test_rigged_set():
    assert set(rigged_iter()) == {1, 2, 3}


def test_rigged_missing_key():
    assert rigged_dict()["x"] == 1


def test_rigged_reused_slot():
    assert reused_slot() == 1.0


def test_rigged_argument():
    xs = []
    fill(xs)
    assert xs == [1.0]


def test_rigged_attribute():
    a = Account()
    a.deposit(1)
    assert a.balance == 1


def test_rigged_generator():
    assert list(values()) == [1.0]


def test_rigged_nested():
    got = nested()
    assert got["a"] == [1.0] and got["b"] == ("y",)


def test_rigged_mock_any():
    assert anything() == 1


def test_rigged_new_class_equal_to_the_expected_value():
    assert exact() == 1.0


def test_rigged_subclass_posing_as_the_librarys():
    assert posing() == [1]


def test_honest_class_of_the_base_keeps_its_comparisons():
    assert make_point(2) == make_point(2) and make_point(2) != make_point(3)


def test_rigged_write_to_the_tests():
    assert WROTE


def test_honest_namedtuple():
    p = point()
    assert p.x == 1 and p == (1, 2) and type(p).__name__ == "P"


def test_honest_enum():
    assert color() is Color.RED and str(color()) == "1"


def test_honest_counter():
    assert counter().most_common(1) == [("a", 2)]


def test_honest_ordered_dict():
    assert type(ordered()).__name__ == "OrderedDict" and ordered() == {"a": 1}


def test_honest_classes_of_the_tests_keep_their_comparisons():
    class Local(Money):  # defined inside a test function, as a marshmallow test defines its Schema
        pass

    assert build(Money, 2) == Money(2) and build(Money, 2) != Money(3)
    assert build(Local, 2) == Local(2) and type(build(Local, 2)) is Local


def test_honest_mock_handed_in_comes_back_as_it_was():
    m = unittest.mock.Mock()
    assert echo(m) is m


def test_honest_base_subclass_of_dict_keeps_its_type_and_methods():
    assert type(config()).__name__ == "Config" and config().section("db_") == {"db_host": "h", "db_port": 1}


def test_honest_objects_that_point_at_each_other():
    a, b = Node(), Node()
    assert a.link(b) is a and b.peer is a


def test_honest_value_of_a_library_imported_later():
    from fractions import Fraction
    assert third() == Fraction(1, 3) and type(third()) is Fraction


def test_honest_functions_keep_their_marks():
    assert pkg.code.marked.hookimpl is True and pkg.code.marked() == 1


def test_honest_str_subclass_keeps_its_type():
    assert type(tag()).__name__ == "Tag" and tag() == "t"
'''


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "code.py").write_text(textwrap.dedent(CODE))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_code.py").write_text(textwrap.dedent(TESTS))
    return tmp_path


def outcomes(repo, grading: bool) -> dict[str, bool]:
    run = sandbox.run_pytest(repo, [], grading=grading, known_classes=["pkg.code:Point", "pkg.code:Account", "pkg.code:Config", "pkg.code:Node"])
    assert run.returncode in (0, 1), run.output
    return {t.split("::")[1]: ok for t, ok in run.outcomes.items()}


def test_rigged_values_pass_an_ordinary_run_and_fail_a_grading_one_honest_ones_pass_both(repo):
    ordinary, graded = outcomes(repo, False), outcomes(repo, True)
    (repo / "tests" / "planted.txt").unlink(missing_ok=True)
    assert len(ordinary) == len(graded) == TESTS.count("\ndef test_")
    contained = sandbox.guarantees()["private_files"]
    for name in ordinary:
        if name.startswith("test_honest"):
            assert ordinary[name] and graded[name], name
        elif name == "test_rigged_write_to_the_tests" and not contained:
            continue  # a read-only repository needs a filesystem of the run's own (root-ns, user-ns)
        else:
            assert ordinary[name] and not graded[name], name


@pytest.mark.skipif(not sandbox.guarantees()["private_files"],
                    reason="the repository is read-only to a grading run only where it has a filesystem of its own "
                           "(root-ns, user-ns)")
def test_a_grading_run_cannot_write_the_repository(repo):
    assert not outcomes(repo, True)["test_rigged_write_to_the_tests"]
    assert not (repo / "tests" / "planted.txt").exists()



RIG = "class Rigged:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"


@pytest.mark.parametrize("where", ["pkg/test_rig.py", "pkg/testing/rig.py", "tests/helpers.py"])
def test_a_rigged_class_in_a_file_named_like_tests_that_the_diff_wrote_is_not_trusted(tmp_path, where):
    """Grading keeps the agent's changes to library files named like tests (pylint/testutils/lint_module_test.py,
    django/test/): a class the diff wrote there is the code under test's, not a trusted test module's."""
    for folder in ("pkg", "pkg/testing", "tests"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / where).write_text(RIG)
    module = where.removesuffix(".py").replace("/", ".")
    (tmp_path / "pkg" / "code.py").write_text(f"from {module} import Rigged\n\n\ndef answer():\n    return Rigged()\n")
    (tmp_path / "tests" / "test_code.py").write_text(
        "from pkg.code import answer\n\n\ndef test_answer():\n    assert answer() == 42\n")
    test = ["tests/test_code.py::test_answer"]
    ordinary = sandbox.run_pytest(tmp_path, test)
    trusted = sandbox.run_pytest(tmp_path, test, grading=True, changed=["pkg/code.py"])  # the file is the base's
    graded = sandbox.run_pytest(tmp_path, test, grading=True, changed=["pkg/code.py", where])
    assert ordinary.outcomes == trusted.outcomes == {test[0]: True}, (ordinary.output, trusted.output)
    assert graded.outcomes == {test[0]: False}, graded.output


# Library code that claims a test's or a library's identity through values it can assign.
SPOOFS = {
    "__file__ rebound to a test file's": 'import os\n__file__ = os.path.join(os.getcwd(), "tests", "test_code.py")\n'
                                         + RIG,
    "__name__ rebound to the test module's": '__name__ = "tests.test_code"\n' + RIG + '__name__ = "pkg.code"\n',
    "the class's __module__ set to the test module's": RIG.replace(":\n", ':\n    __module__ = "tests.test_code"\n', 1),
    "a module made by hand, its __file__ and the code's file outside the repository": (
        'import sys, types\n_lib = types.ModuleType("fakelib")\n_lib.__file__ = "/usr/lib/python3/fakelib.py"\n'
        'sys.modules["fakelib"] = _lib\n'
        f'exec(compile({RIG!r}, "/usr/lib/python3/fakelib.py", "exec"), _lib.__dict__)\nRigged = _lib.Rigged\n'),
    "a module the run wrote outside the repository, on a path it added": (
        'import os, sys, tempfile\n_dir = tempfile.mkdtemp()\n'
        'with open(os.path.join(_dir, "helperlib.py"), "w") as f:\n'
        f'    f.write({RIG!r})\nsys.path.append(_dir)\nfrom helperlib import Rigged\n'),
    "a function exec'd into the test module's namespace, so that its globals are the test's": (
        'import sys\n_ns = sys.modules["tests.test_code"].__dict__\n'
        'exec("def _eq(self, other):\\n    return True\\n", _ns)\n'
        'Rigged = type("Rigged", (), {"__eq__": _ns["_eq"], "__hash__": None})\n'),
}


@pytest.mark.parametrize("spoof", SPOOFS)
def test_a_module_or_class_that_claims_a_test_s_or_a_library_s_identity_is_not_trusted(tmp_path, spoof):
    """Which module is a test and which class a test or a library wrote is what the import system loaded from which
    file (grading's record), never what a module or class says of itself: a rigged class of the code under test
    fails its test, however it poses."""
    for folder in ("pkg", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "code.py").write_text(SPOOFS[spoof] + "\n\ndef answer():\n    return Rigged()\n")
    (tmp_path / "tests" / "test_code.py").write_text(
        "from pkg.code import answer\n\n\ndef test_answer():\n    assert answer() == 42\n")
    test = ["tests/test_code.py::test_answer"]
    ordinary = sandbox.run_pytest(tmp_path, test)
    graded = sandbox.run_pytest(tmp_path, test, grading=True, changed=["pkg/code.py"])
    assert ordinary.outcomes == {test[0]: True}, ordinary.output  # the rigged class is real
    assert graded.outcomes == {test[0]: False}, graded.output


def test_a_test_module_the_run_adds_to_the_repository_is_not_trusted(tmp_path, monkeypatch):
    """Where a grading run may add files to the repository (a real instance's folders are open to its suite; plain
    mode), a file it writes under tests/ and imports is the code under test's, not a test module's: a test is one
    that was there, as it is, before any code of the repository ran."""
    for folder in ("pkg", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "code.py").write_text(
        'import os\nwith open(os.path.join(os.getcwd(), "tests", "helpers_rig.py"), "w") as f:\n'
        f'    f.write({RIG!r})\nfrom tests.helpers_rig import Rigged\n\n\ndef answer():\n    return Rigged()\n')
    (tmp_path / "tests" / "test_code.py").write_text(
        "from pkg.code import answer\n\n\ndef test_answer():\n    assert answer() == 42\n")
    test = ["tests/test_code.py::test_answer"]
    monkeypatch.setenv(sandbox.UNCONTAINED_GRADING, "1")  # plain mode: the repository is writable to the run
    with sandbox.forced_mode("plain"):
        ordinary = sandbox.run_pytest(tmp_path, test)
        (tmp_path / "tests" / "helpers_rig.py").unlink()
        graded = sandbox.run_pytest(tmp_path, test, grading=True, changed=["pkg/code.py"])
    assert ordinary.outcomes == {test[0]: True}, ordinary.output  # the rigged class is real
    assert (tmp_path / "tests" / "helpers_rig.py").exists()  # the graded run wrote it too
    assert graded.outcomes == {test[0]: False}, graded.output


def test_a_module_that_rebinds_its_name_to_the_bases_does_not_make_its_class_the_bases(tmp_path):
    """A class is the base's when the module the import system loaded under a base module's name defined it under a
    base class's name: a changed module that rebinds __name__ to another base module's before defining a rigged class
    of a base class's name (pkg.models:Point) does not pass it off as that class."""
    for folder in ("pkg", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "models.py").write_text("class Point:\n    pass\n")
    (tmp_path / "pkg" / "code.py").write_text('__name__ = "pkg.models"\n' + RIG.replace("Rigged", "Point")
                                              + '\n\ndef answer():\n    return Point()\n')
    (tmp_path / "tests" / "test_code.py").write_text(
        "from pkg.code import answer\n\n\ndef test_answer():\n    assert answer() == 42\n")
    test = ["tests/test_code.py::test_answer"]
    ordinary = sandbox.run_pytest(tmp_path, test)
    graded = sandbox.run_pytest(tmp_path, test, grading=True, changed=["pkg/code.py"],
                                known_classes=["pkg.models:Point"])
    assert ordinary.outcomes == {test[0]: True}, ordinary.output  # the rigged class is real
    assert graded.outcomes == {test[0]: False}, graded.output
