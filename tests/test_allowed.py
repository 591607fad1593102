"""Tests for composer.allowed: a parameter's kind and allowed-values clause."""

import pytest

from composer.allowed import allows, fits, load_yaml


def test_kinds_take_an_int_as_a_float_and_no_bool_as_a_number():
    assert fits(3, "int") and fits(3, "float") and fits(0.5, "float") and fits("x", None)
    assert not fits(True, "int") and not fits(True, "float") and fits(True, "bool") and not fits(3.0, "int")


@pytest.mark.parametrize("clause, value, expected", [
    ("at least 1", 1, True), ("at least 1", 0, False), ("more than 0, at most 1", 1, True),
    ("more than 0, at most 1", 0, False), ("less than 1e-3", 1e-4, True), ("train | test", "test", True),
    ("train | test", "eval", False), ("1 | 2", 2, True), ("non-empty", {}, False), ("non-empty", "x", True)])
def test_clauses(clause, value, expected):
    assert allows(clause, value) is expected


def test_a_clause_of_none_of_the_forms_is_an_error_that_shows_them():
    with pytest.raises(ValueError, match=r"\{>= 1\} is not an allowed-values clause \(\{at least 1\}"):
        allows(">= 1", 2)


def test_yaml_reads_exponents_as_floats():
    assert load_yaml("1e-3") == 0.001 and load_yaml("{a: [1, 2]}") == {"a": [1, 2]}
