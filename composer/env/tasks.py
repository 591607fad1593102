"""Embedded SWE-bench-Lite-shaped coding tasks, generated offline and validated by running them.

    from composer.env import tasks

    records = tasks.generate(50, seed=0, split="train")            # list of SWE-bench Lite records
    tasks.save_jsonl(records, "train.jsonl"); records = tasks.load_jsonl("train.jsonl")
    repo = tasks.materialize(records[0], Path("work/repo"))         # buggy repo + its tests
    tasks.gold_repo(records[0], Path("work/gold"))                  # the same with the fix applied
    tasks.describe(records[0])   # {"family": "off_by_one", "module": "stats", "unit": "median", ...}

A task is a tiny package (`calc/ops.py`, `calc/stats.py`, ...) assembled from a library of
pure-function and small-class templates, with ONE bug injected by an AST mutation from
one of MUTATIONS, an issue-style problem statement that shows the symptom (a call, what it
returns, what it should return), pytest files (added by `test_patch`) and the gold fix
(`patch`). Records carry exactly the 12 SWE-bench Lite fields, so everything downstream
(agents, the swebench adapter, reports) treats embedded and real tasks alike.

Records carry no file contents, so `instance_id` encodes what rebuilds the repo:
`composer-embedded__calc-train-s123456-m1f3d0-xff` = package, split, task seed, modules,
functions per module, distractors, mutation families (bit mask over MUTATIONS). Rebuilding
is deterministic and checked against `base_commit` (a content hash of the buggy tree).

Validation: every emitted task was materialized buggy and gold and run with
`sandbox.run_pytest` (one pytest process per tree): FAIL_TO_PASS are exactly the tests
that fail buggy and pass gold (at least one, all in the mutated function), PASS_TO_PASS
the tests that pass both; a candidate with any test failing gold, a timeout, no failing
test, or a statement that quotes a changed line is dropped and the next seed tried.

Train/test disjointness: a bug site is (module template, function, family, site index),
each site belongs to exactly one split by a fixed hash (TEST_SHARE of them to "test"),
and a split only ever mutates its own sites. So no bug site (hence no gold patch) occurs
in both splits; the unmutated helper functions around it do recur, as real repos recur.
Task seeds come from a per-split stream, and instance ids carry the split.

Cost: about 0.5 s of CPU per candidate (two pytest runs and a probe, each ~0.25 s of
interpreter start-up); 50 tasks take ~25 s on 2 cores, ~7% of candidates being dropped
(equivalent mutants). The default Difficulty (one module, three tested functions, all
families) keeps the bug findable from the statement by a scripted expert that reads the
named function, while a policy that edits at random almost never passes FAIL_TO_PASS and
PASS_TO_PASS together. Output is deterministic unless a validation run hits its timeout
(10 s, far above the ~0.05 s the tests need), which only an overloaded host would cause.
"""

import ast
import copy
import difflib
import functools
import hashlib
import itertools
import json
import os
import random
import re
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from composer.env import sandbox

SCHEMA_FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
                 "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit")
MUTATIONS = ("operator", "comparison", "off_by_one", "constant", "swapped_args", "wrong_variable",
             "missing_branch", "wrong_return")
GENERATOR_VERSION = "0.1"
REPO_PREFIX = "composer-embedded/"
SPLITS = ("train", "test")
TEST_SHARE = 25  # percent of bug sites that belong to the test split
VALIDATION_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Difficulty:
    n_modules: int = 1  # modules in the package, 1..len(LIBRARY)
    n_functions: int = 3  # tested functions/classes per module (capped at what a module has)
    families: tuple[str, ...] = MUTATIONS  # mutation families the bug is drawn from
    distractors: int = 0  # extra untested functions/classes mixed into the modules


# --- the template library --------------------------------------------------------------------
# module -> (package, module docstring, source, cases). Every top-level def/class is a "unit";
# a case is a call expression, or a tuple of setup statements ending in the expression.
# Expected values come from running this (trusted) source; sources are canonicalized with
# ast.unparse at load so that unparsing a mutated tree changes only the mutated spot.

LIBRARY = {
    "ops": ("calc", "Arithmetic helpers.", '''
def clamp(x, lo, hi):
    """Limit x to the closed interval [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x

def mean(xs):
    """Arithmetic mean of a non-empty list."""
    if not xs:
        raise ValueError('mean of an empty list')
    total = 0
    for x in xs:
        total += x
    return total / len(xs)

def factorial(n):
    """n! for n >= 0."""
    if n < 0:
        raise ValueError('factorial of a negative number')
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result

def digit_sum(n):
    """Sum of the decimal digits of n (the sign is ignored)."""
    total = 0
    for ch in str(abs(n)):
        total += int(ch)
    return total

def is_prime(n):
    """True when n is a prime number."""
    if n < 2:
        return False
    for d in range(2, int(n ** 0.5) + 1):
        if n % d == 0:
            return False
    return True

def percent_change(old, new):
    """Relative change from old to new in percent, rounded to 2 decimals."""
    if old == 0:
        raise ValueError('change from zero is undefined')
    return round((new - old) / old * 100, 2)

def sign(x):
    """-1, 0 or 1 with the sign of x."""
    if x > 0:
        return 1
    elif x < 0:
        return -1
    return 0

def lerp(a, b, t):
    """Linear interpolation between a and b at t in [0, 1]."""
    return a + (b - a) * t
''', {
        "clamp": ["clamp(5, 0, 10)", "clamp(-3, 0, 10)", "clamp(12, 0, 10)", "clamp(0, 0, 10)", "clamp(10, 0, 10)"],
        "mean": ["mean([1, 2, 3])", "mean([4])", "mean([2, 4, 9, 1])", "mean([])"],
        "factorial": ["factorial(0)", "factorial(1)", "factorial(5)", "factorial(-1)", "factorial(3)"],
        "digit_sum": ["digit_sum(123)", "digit_sum(-45)", "digit_sum(0)", "digit_sum(9081)"],
        "is_prime": ["is_prime(1)", "is_prime(2)", "is_prime(9)", "is_prime(13)", "is_prime(25)", "is_prime(97)"],
        "percent_change": ["percent_change(50, 75)", "percent_change(80, 60)", "percent_change(0, 5)",
                           "percent_change(3, 4)"],
        "sign": ["sign(7)", "sign(-2)", "sign(0)"],
        "lerp": ["lerp(0, 10, 0.5)", "lerp(2, 4, 0)", "lerp(2, 4, 1)", "lerp(-1, 1, 0.25)"],
    }),
    "stats": ("calc", "Descriptive statistics on plain lists.", '''
def median(xs):
    """Median of a non-empty list."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError('median of an empty list')
    mid = n // 2
    if n % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2

def variance(xs):
    """Sample variance (n - 1 in the denominator)."""
    n = len(xs)
    if n < 2:
        raise ValueError('variance needs at least two values')
    m = sum(xs) / n
    return sum([(x - m) ** 2 for x in xs]) / (n - 1)

def mode(xs):
    """Most frequent value; the first one seen wins ties."""
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    best = xs[0]
    for x in xs:
        if counts[x] > counts[best]:
            best = x
    return best

def running_total(xs):
    """Prefix sums of xs."""
    out = []
    total = 0
    for x in xs:
        total += x
        out.append(total)
    return out

def moving_average(xs, k):
    """Means of every window of k consecutive values."""
    if k <= 0:
        raise ValueError('window must be positive')
    return [sum(xs[i:i + k]) / k for i in range(len(xs) - k + 1)]

def normalize(xs):
    """Rescale xs linearly onto [0, 1]."""
    lo = min(xs)
    hi = max(xs)
    if hi == lo:
        return [0.0 for _ in xs]
    return [(x - lo) / (hi - lo) for x in xs]

def histogram(xs, width):
    """Counts per bin [b, b + width), keyed by the bin start, sorted."""
    bins = {}
    for x in xs:
        start = x // width * width
        bins[start] = bins.get(start, 0) + 1
    return dict(sorted(bins.items()))
''', {
        "median": ["median([3, 1, 2])", "median([4, 1, 3, 2])", "median([5])", "median([])",
                   "median([7, 7, 1, 9, 2, 8])"],
        "variance": ["variance([1, 2, 3, 4])", "variance([2, 2, 2])", "variance([5])", "variance([1, 5, 9])"],
        "mode": ["mode([1, 2, 2, 3])", "mode([4, 5, 5, 4])", "mode([7])", "mode([3, 1, 1, 3, 3])"],
        "running_total": ["running_total([1, 2, 3])", "running_total([])", "running_total([5, -2, 4, 0])"],
        "moving_average": ["moving_average([1, 2, 3, 4], 2)", "moving_average([2, 4, 6], 3)",
                           "moving_average([1, 2], 3)", "moving_average([1, 2, 3], 0)",
                           "moving_average([3, 6, 9, 12], 1)"],
        "normalize": ["normalize([1, 2, 3])", "normalize([4, 4])", "normalize([10, 0, 5])"],
        "histogram": ["histogram([1, 2, 11, 15, 30], 10)", "histogram([0, 5, 5], 5)", "histogram([], 3)",
                      "histogram([9, 3, 6], 3)"],
    }),
    "strings": ("textkit", "String helpers.", '''
def capitalize_words(s):
    """Upper-case the first letter of every space-separated word."""
    return ' '.join([w[:1].upper() + w[1:] for w in s.split(' ')])

def is_palindrome(s):
    """True when s reads the same backwards, ignoring case and punctuation."""
    chars = [c.lower() for c in s if c.isalnum()]
    return chars == chars[::-1]

def truncate(s, n):
    """Cut s to at most n characters, ending in '...' when something was cut."""
    if len(s) <= n:
        return s
    if n < 3:
        return s[:n]
    return s[:n - 3] + '...'

def count_vowels(s):
    """Number of vowels in s."""
    count = 0
    for c in s.lower():
        if c in 'aeiou':
            count += 1
    return count

def slugify(s):
    """Lower-case words of s joined by '-', punctuation dropped."""
    words = []
    for w in s.lower().split():
        w = ''.join([c for c in w if c.isalnum()])
        if w:
            words.append(w)
    return '-'.join(words)

def pad_left(s, width, fill):
    """s right-aligned in a field of width characters, padded with fill."""
    if len(s) >= width:
        return s
    return fill * (width - len(s)) + s

def caesar(s, k):
    """Shift the letters of s by k places, keeping case; other characters unchanged."""
    out = []
    for c in s:
        if c.islower():
            out.append(chr((ord(c) - 97 + k) % 26 + 97))
        elif c.isupper():
            out.append(chr((ord(c) - 65 + k) % 26 + 65))
        else:
            out.append(c)
    return ''.join(out)
''', {
        "capitalize_words": ["capitalize_words('hello world')", "capitalize_words('a b c')", "capitalize_words('')",
                             "capitalize_words('already Done')"],
        "is_palindrome": ["is_palindrome('Racecar')", "is_palindrome('A man, a plan, a canal: Panama')",
                          "is_palindrome('python')", "is_palindrome('')", "is_palindrome('ab')"],
        "truncate": ["truncate('hello', 10)", "truncate('hello world', 8)", "truncate('hello', 5)",
                     "truncate('hello', 2)", "truncate('abcdef', 3)"],
        "count_vowels": ["count_vowels('banana')", "count_vowels('SKY')", "count_vowels('Education')",
                         "count_vowels('')"],
        "slugify": ["slugify('Hello, World!')", "slugify('  Many   spaces here ')", "slugify('a-b c')",
                    "slugify('!!!')"],
        "pad_left": ["pad_left('7', 3, '0')", "pad_left('abc', 2, '*')", "pad_left('ab', 5, '.')",
                     "pad_left('xy', 2, '-')"],
        "caesar": ["caesar('abc', 1)", "caesar('xyz', 3)", "caesar('Hello, World', 13)", "caesar('Zz', 1)",
                   "caesar('abc', -1)"],
    }),
    "words": ("textkit", "Helpers for words and lines of text.", '''
def word_count(text):
    """How often each lower-cased word occurs, in order of first appearance."""
    counts = {}
    for w in text.lower().split():
        counts[w] = counts.get(w, 0) + 1
    return counts

def longest_word(text):
    """The longest word, the first one on ties; '' when there is none."""
    best = ''
    for w in text.split():
        if len(w) > len(best):
            best = w
    return best

def acronym(text):
    """Upper-cased first letters of the words."""
    return ''.join([w[0].upper() for w in text.split()])

def wrap_words(text, width):
    """Greedy wrapping into lines of whole words of at most width characters where possible."""
    lines = []
    line = ''
    for w in text.split():
        if not line:
            line = w
        elif len(line) + 1 + len(w) <= width:
            line = line + ' ' + w
        else:
            lines.append(line)
            line = w
    if line:
        lines.append(line)
    return lines

def camel_to_snake(name):
    """'parseHttpResponse' -> 'parse_http_response'."""
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0:
            out.append('_')
        out.append(c.lower())
    return ''.join(out)

def initials(name):
    """'ada king lovelace' -> 'A.K.L.'."""
    parts = name.split()
    if not parts:
        return ''
    return '.'.join([p[0].upper() for p in parts]) + '.'
''', {
        "word_count": ["word_count('the cat and the hat')", "word_count('A a A')", "word_count('')",
                       "word_count('one')"],
        "longest_word": ["longest_word('a quick brown fox')", "longest_word('tie bee')", "longest_word('')",
                         "longest_word('extraordinary day')"],
        "acronym": ["acronym('portable network graphics')", "acronym('as soon as possible')", "acronym('')",
                    "acronym('x')"],
        "wrap_words": ["wrap_words('the quick brown fox jumps', 10)", "wrap_words('aa bb cc', 5)",
                       "wrap_words('', 4)", "wrap_words('one two', 7)", "wrap_words('longword a', 3)"],
        "camel_to_snake": ["camel_to_snake('parseHttpResponse')", "camel_to_snake('simple')",
                           "camel_to_snake('HTMLParser')", "camel_to_snake('aB')"],
        "initials": ["initials('ada king lovelace')", "initials('grace')", "initials('')",
                     "initials('alan  turing')"],
    }),
    "lists": ("datakit", "List utilities.", '''
def chunk(xs, n):
    """Consecutive pieces of length n (the last one may be shorter)."""
    if n <= 0:
        raise ValueError('chunk size must be positive')
    return [xs[i:i + n] for i in range(0, len(xs), n)]

def flatten(xss):
    """One list with the items of every inner list, in order."""
    out = []
    for xs in xss:
        for x in xs:
            out.append(x)
    return out

def dedupe(xs):
    """xs without repeats, keeping first occurrences in order."""
    seen = set()
    out = []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out

def rotate(xs, k):
    """xs rotated left by k places."""
    if not xs:
        return []
    k = k % len(xs)
    return xs[k:] + xs[:k]

def pairwise_diff(xs):
    """Differences between consecutive items."""
    return [xs[i + 1] - xs[i] for i in range(len(xs) - 1)]

def argmax(xs):
    """Index of the largest item, the first one on ties."""
    best = 0
    for i in range(1, len(xs)):
        if xs[i] > xs[best]:
            best = i
    return best

def interleave(a, b):
    """a[0], b[0], a[1], b[1], ... then the rest of the longer list."""
    out = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out.append(a[i])
        if i < len(b):
            out.append(b[i])
    return out
''', {
        "chunk": ["chunk([1, 2, 3, 4, 5], 2)", "chunk([1, 2, 3], 3)", "chunk([], 4)", "chunk([1, 2], 0)",
                  "chunk([1, 2, 3, 4], 3)"],
        "flatten": ["flatten([[1, 2], [3], []])", "flatten([])", "flatten([[4], [5, 6]])"],
        "dedupe": ["dedupe([1, 2, 1, 3, 2])", "dedupe([])", "dedupe([5, 5, 5])", "dedupe([3, 1, 2])"],
        "rotate": ["rotate([1, 2, 3, 4], 1)", "rotate([1, 2, 3], 4)", "rotate([], 2)", "rotate([1, 2, 3], 0)"],
        "pairwise_diff": ["pairwise_diff([1, 4, 9, 16])", "pairwise_diff([5])", "pairwise_diff([3, 1])"],
        "argmax": ["argmax([1, 3, 2])", "argmax([5, 1, 5])", "argmax([7])", "argmax([1, 2, 3, 9])"],
        "interleave": ["interleave([1, 2, 3], ['a', 'b'])", "interleave([], [1])", "interleave([1], [2, 3, 4])"],
    }),
    "records": ("datakit", "Helpers for dictionaries and lists of records.", '''
def group_by(rows, key):
    """Rows grouped by row[key], groups in order of first appearance."""
    groups = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return groups

def invert(d):
    """{value: key}; when values repeat, the last key wins."""
    out = {}
    for k, v in d.items():
        out[v] = k
    return out

def merge_counts(a, b):
    """Sum of two count dictionaries."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out

def pluck(rows, key, default):
    """row[key] for every row, default where the key is missing."""
    return [row.get(key, default) for row in rows]

def top_n(counts, n):
    """The n keys with the largest counts, ties broken by key."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ranked[:n]]

def filter_range(d, lo, hi):
    """Items whose value lies in [lo, hi)."""
    return {k: v for k, v in d.items() if lo <= v < hi}
''', {
        "group_by": ["group_by([{'t': 'a', 'v': 1}, {'t': 'b', 'v': 2}, {'t': 'a', 'v': 3}], 't')",
                     "group_by([], 't')", "group_by([{'k': 1}], 'k')"],
        "invert": ["invert({'a': 1, 'b': 2})", "invert({})", "invert({'x': 1, 'y': 1})"],
        "merge_counts": ["merge_counts({'a': 1}, {'a': 2, 'b': 1})", "merge_counts({}, {'z': 3})",
                         "merge_counts({'q': 4}, {})"],
        "pluck": ["pluck([{'a': 1}, {'b': 2}], 'a', None)", "pluck([], 'a', 0)",
                  "pluck([{'a': 3}, {'a': 4}], 'a', -1)"],
        "top_n": ["top_n({'a': 3, 'b': 5, 'c': 1}, 2)", "top_n({'x': 2, 'y': 2, 'z': 1}, 1)", "top_n({'a': 1}, 3)",
                  "top_n({'p': 1, 'q': 4, 'r': 4}, 3)"],
        "filter_range": ["filter_range({'a': 1, 'b': 5, 'c': 10}, 1, 10)", "filter_range({}, 0, 1)",
                         "filter_range({'x': 3, 'y': 4}, 4, 5)"],
    }),
    "models": ("objkit", "Small value classes.", '''
class Rect:
    """Axis-aligned rectangle with its corner at (x, y)."""

    def __init__(self, x, y, w, h):
        self.x = x
        self.y = y
        self.w = w
        self.h = h

    def area(self):
        return self.w * self.h

    def perimeter(self):
        return 2 * (self.w + self.h)

    def contains(self, px, py):
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h

class Stack:
    """Last-in first-out stack."""

    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        if not self.items:
            raise IndexError('pop from an empty stack')
        return self.items.pop()

    def peek(self):
        if not self.items:
            return None
        return self.items[-1]

    def size(self):
        return len(self.items)

class Account:
    """A bank account that never goes below zero."""

    def __init__(self, owner, balance):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError('deposit must be positive')
        self.balance += amount
        return self.balance

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError('insufficient funds')
        self.balance -= amount
        return self.balance

class Vector:
    """2-D vector."""

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def add(self, other):
        return Vector(self.x + other.x, self.y + other.y)

    def scale(self, k):
        return Vector(self.x * k, self.y * k)

    def dot(self, other):
        return self.x * other.x + self.y * other.y

    def as_tuple(self):
        return (self.x, self.y)

class Inventory:
    """Item counts."""

    def __init__(self):
        self.counts = {}

    def add(self, item, qty):
        self.counts[item] = self.counts.get(item, 0) + qty

    def remove(self, item, qty):
        have = self.counts.get(item, 0)
        if qty > have:
            raise KeyError(item)
        if qty == have:
            del self.counts[item]
        else:
            self.counts[item] = have - qty

    def total(self):
        return sum(self.counts.values())
''', {
        "Rect": ["Rect(0, 0, 3, 4).area()", "Rect(1, 1, 2, 5).perimeter()", "Rect(0, 0, 2, 2).contains(1, 1)",
                 "Rect(0, 0, 2, 2).contains(2, 1)", "Rect(1, 1, 2, 2).contains(1, 1)"],
        "Stack": [("s = Stack()", "s.push(1)", "s.push(2)", "s.pop()"), ("s = Stack()", "s.peek()"),
                  ("s = Stack()", "s.push(3)", "s.size()"), ("s = Stack()", "s.pop()"),
                  ("s = Stack()", "s.push(4)", "s.push(5)", "s.peek()")],
        "Account": [("a = Account('ann', 10)", "a.deposit(5)"), ("a = Account('bob', 10)", "a.withdraw(10)"),
                    ("a = Account('cy', 5)", "a.withdraw(6)"), ("a = Account('di', 5)", "a.deposit(0)"),
                    ("a = Account('ed', 7)", "a.withdraw(2)")],
        "Vector": ["Vector(1, 2).add(Vector(3, 4)).as_tuple()", "Vector(1, -2).scale(3).as_tuple()",
                   "Vector(1, 2).dot(Vector(3, 4))", "Vector(0, 5).as_tuple()"],
        "Inventory": [("inv = Inventory()", "inv.add('apple', 3)", "inv.add('apple', 2)", "inv.total()"),
                      ("inv = Inventory()", "inv.add('pear', 2)", "inv.remove('pear', 2)", "inv.counts"),
                      ("inv = Inventory()", "inv.add('fig', 5)", "inv.remove('fig', 2)", "inv.counts"),
                      ("inv = Inventory()", "inv.remove('kiwi', 1)")],
    }),
}


@functools.cache
def _units(module: str) -> dict[str, str]:
    """Canonical source of each unit of a library module, in library order."""
    tree = ast.parse(LIBRARY[module][2])
    return {node.name: ast.unparse(node) for node in tree.body}


@functools.cache
def _gold_namespace(module: str) -> dict:
    ns = {}
    exec(compile("\n\n".join(_units(module).values()), f"<library {module}>", "exec"), ns)
    return ns


def _case(case) -> tuple[tuple[str, ...], str]:
    """(setup statements, expression)."""
    return ((), case) if isinstance(case, str) else (tuple(case[:-1]), case[-1])


@functools.cache
def _expected(module: str, unit: str) -> tuple:
    """Per case ("ok", value) or ("raise", exception name), from the gold library."""
    out = []
    for case in LIBRARY[module][3][unit]:
        setup, expr = _case(case)
        ns = dict(_gold_namespace(module))
        try:
            for stmt in setup:
                exec(stmt, ns)
            out.append(("ok", eval(expr, ns)))
        except Exception as e:  # the library's documented errors (ValueError on empty input, ...)
            out.append(("raise", type(e).__name__))
    return tuple(out)


# --- mutations ------------------------------------------------------------------------------
# A site is (node index in ast.walk order, action); applying it to a fresh parse of the unit
# and unparsing gives the buggy unit. Each family is a small rule set meant to read like a
# human slip, not a random token flip.

OP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
           ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
STR_SWAP = {" ": "", "-": "_", "_": "-", ".": "", "...": "..", "aeiou": "aeio"}
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _parents(tree) -> dict:
    out = {}
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        out[id(child)] = (node, field, i)
            elif isinstance(value, ast.AST):
                out[id(value)] = (node, field, None)
    return out


def _replace(parents, node, new) -> None:
    parent, field, i = parents[id(node)]
    if i is None:
        setattr(parent, field, new)
    else:
        getattr(parent, field)[i] = new


def _is_docstring(node, parents) -> bool:
    parent = parents.get(id(node), (None,))[0]
    return isinstance(parent, ast.Expr)


def _locals(func) -> dict[str, int]:
    """Name -> line of first definition, for parameters and plain assignments (not comprehensions)."""
    defs = {a.arg: func.lineno for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
                             ast.FunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defs[node.id] = min(defs.get(node.id, node.lineno), node.lineno)
        stack.extend(ast.iter_child_nodes(node))
    defs.pop("self", None)
    return defs


def _scopes(tree):
    """(function, nodes of its own scope): comprehension and lambda bodies left out."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        own, stack = [], list(func.body)
        while stack:
            node = stack.pop()
            own.append(node)
            if not isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
                                     ast.FunctionDef, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(node))
        yield func, own


def _nearest_other(defs: dict[str, int], name: str, line: int) -> str | None:
    """The other local defined most recently before `line` (a plausible wrong pick)."""
    before = [(ln, n) for n, ln in defs.items() if n != name and ln <= line]
    return max(before)[1] if before else None


def _self_attrs(tree) -> list[str]:
    attrs = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                and node.value.id == "self" and node.attr not in attrs):
            attrs.append(node.attr)
    return attrs


def _bound(expr, role: str):
    """An off-by-one version of a range/slice/index bound."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)) \
            and isinstance(expr.right, ast.Constant) and expr.right.value == 1:
        return copy.deepcopy(expr.left)  # n + 1 -> n, n - 1 -> n
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        c = expr.value
        return ast.Constant(c - 1 if role == "upper" and c > 0 else c + 1)
    return ast.BinOp(copy.deepcopy(expr), ast.Sub() if role == "upper" else ast.Add(), ast.Constant(1))


def _sites(tree, family: str) -> list[tuple[int, tuple]]:
    nodes = list(ast.walk(tree))
    parents = _parents(tree)
    index = {id(n): i for i, n in enumerate(nodes)}
    out = []
    if family == "operator":
        for n in nodes:
            if isinstance(n, (ast.BinOp, ast.AugAssign)) and type(n.op) in OP_SWAP:
                operands = [n.left, n.right] if isinstance(n, ast.BinOp) else [n.value]
                if not any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
                    out.append((index[id(n)], ("op",)))
    elif family == "comparison":
        for n in nodes:
            if isinstance(n, ast.Compare):
                out += [(index[id(n)], ("cmp", i)) for i, op in enumerate(n.ops) if type(op) in CMP_SWAP]
    elif family == "off_by_one":
        for n in nodes:
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "range" and n.args:
                if len(n.args) >= 2:
                    out.append((index[id(n)], ("bound", "args", 0, "lower")))
                out.append((index[id(n)], ("bound", "args", min(len(n.args), 2) - 1, "upper")))
            elif isinstance(n, ast.Slice):
                out += [(index[id(n)], ("bound", f, None, role))
                        for f, role in (("lower", "lower"), ("upper", "upper")) if getattr(n, f) is not None]
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and (
                    (isinstance(n.slice, ast.Constant) and type(n.slice.value) is int)
                    or (isinstance(n.slice, ast.BinOp) and isinstance(n.slice.right, ast.Constant))):
                out.append((index[id(n)], ("bound", "slice", None, "index")))
    elif family == "constant":
        for n in nodes:
            if isinstance(n, ast.Constant) and not _is_docstring(n, parents):
                v = n.value
                if type(v) in (int, float):
                    out.append((index[id(n)], ("const", {0: 1, 1: 2, 2: 1}.get(v, v + 1))))
                elif isinstance(v, str) and v in STR_SWAP:
                    out.append((index[id(n)], ("const", STR_SWAP[v])))
    elif family == "swapped_args":
        for n in nodes:
            if isinstance(n, ast.Call) and len(n.args) >= 2 and not any(isinstance(a, ast.Starred) for a in n.args):
                a, b = n.args[:2]
                literal = (ast.Constant, ast.List, ast.Dict, ast.Tuple)
                if not isinstance(a, literal) and not isinstance(b, literal) and ast.dump(a) != ast.dump(b):
                    out.append((index[id(n)], ("swap_args",)))
            elif isinstance(n, ast.BinOp) and isinstance(n.op, NON_COMMUTATIVE) \
                    and not isinstance(n.left, ast.Constant) and not isinstance(n.right, ast.Constant):
                out.append((index[id(n)], ("swap_operands",)))
    elif family == "wrong_variable":
        attrs = _self_attrs(tree)
        for func, own in _scopes(tree):
            defs = _locals(func)
            for n in own:
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in defs:
                    parent = parents[id(n)][0]
                    if getattr(parent, "func", None) is n or getattr(parent, "value", None) is n \
                            and isinstance(parent, (ast.Attribute, ast.Subscript)):
                        continue  # swapping a callee or a container mostly just crashes: not a plausible slip
                    other = _nearest_other(defs, n.id, n.lineno)
                    if other:
                        out.append((index[id(n)], ("name", other)))
                elif (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
                      and n.value.id == "self" and n.attr in attrs and len(attrs) > 1):
                    out.append((index[id(n)], ("attr", attrs[(attrs.index(n.attr) + 1) % len(attrs)])))
    elif family == "missing_branch":
        for n in nodes:
            if isinstance(n, ast.If):
                parent, field, i = parents[id(n)]
                is_elif = field == "orelse" and len(getattr(parent, field)) == 1 and isinstance(parent, ast.If)
                if not n.orelse and not is_elif and len(getattr(parent, field)) > 1:
                    out.append((index[id(n)], ("drop_stmt",)))
                elif len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If):
                    out.append((index[id(n)], ("drop_elif",)))
                elif n.orelse:
                    out.append((index[id(n)], ("drop_else",)))
            elif isinstance(n, ast.comprehension) and n.ifs:
                out.append((index[id(n)], ("drop_filter",)))
            elif isinstance(n, ast.BoolOp):
                out.append((index[id(n)], ("drop_operand",)))
            elif isinstance(n, ast.IfExp):
                out.append((index[id(n)], ("ifexp_body",)))
    elif family == "wrong_return":
        for func, own in _scopes(tree):
            defs = _locals(func)
            for n in own:
                if not isinstance(n, ast.Return) or n.value is None:
                    continue
                v = n.value
                if isinstance(v, ast.Constant) and isinstance(v.value, bool):
                    out.append((index[id(n)], ("ret_not_bool",)))
                elif isinstance(v, ast.Name) and _nearest_other(defs, v.id, n.lineno):
                    out.append((index[id(n)], ("ret_name", _nearest_other(defs, v.id, n.lineno))))
                elif isinstance(v, (ast.BinOp, ast.Tuple, ast.Call, ast.BoolOp, ast.UnaryOp, ast.IfExp)):
                    if isinstance(v, ast.Call) and not v.args or isinstance(v, ast.Tuple) and len(v.elts) < 2:
                        continue
                    out.append((index[id(n)], ("ret_part",)))
    else:
        raise ValueError(f"unknown mutation family {family!r}; known: {MUTATIONS}")
    return out


def _apply(unit_src: str, site: tuple[int, tuple]) -> str:
    tree = ast.parse(unit_src)
    nodes = list(ast.walk(tree))
    parents = _parents(tree)
    n, (kind, *arg) = nodes[site[0]], site[1]
    if kind == "op":
        n.op = OP_SWAP[type(n.op)]()
    elif kind == "cmp":
        n.ops[arg[0]] = CMP_SWAP[type(n.ops[arg[0]])]()
    elif kind == "bound":
        field, i, role = arg
        if i is None:
            setattr(n, field, _bound(getattr(n, field), role))
        else:
            getattr(n, field)[i] = _bound(getattr(n, field)[i], role)
    elif kind == "const":
        n.value = arg[0]
    elif kind == "swap_args":
        n.args[0], n.args[1] = n.args[1], n.args[0]
    elif kind == "swap_operands":
        n.left, n.right = n.right, n.left
    elif kind == "name":
        n.id = arg[0]
    elif kind == "attr":
        n.attr = arg[0]
    elif kind == "drop_stmt":
        parent, field, i = parents[id(n)]
        del getattr(parent, field)[i]
    elif kind == "drop_elif":
        n.orelse = n.orelse[0].orelse
    elif kind == "drop_else":
        n.orelse = []
    elif kind == "drop_filter":
        n.ifs = n.ifs[:-1]
    elif kind == "drop_operand":
        _replace(parents, n, n.values[0]) if len(n.values) == 2 else n.values.pop()
    elif kind == "ifexp_body":
        _replace(parents, n, n.body)
    elif kind == "ret_not_bool":
        n.value.value = not n.value.value
    elif kind == "ret_name":
        n.value = ast.Name(arg[0], ast.Load())
    elif kind == "ret_part":
        v = n.value
        if isinstance(v, ast.Tuple):
            v.elts[0], v.elts[1] = v.elts[1], v.elts[0]
        else:  # the computation stops one step short: a + b -> a, round(x, 2) -> x, not x -> x
            n.value = {ast.BinOp: lambda: v.left, ast.Call: lambda: v.args[0], ast.BoolOp: lambda: v.values[0],
                       ast.UnaryOp: lambda: v.operand, ast.IfExp: lambda: v.body}[type(v)]()
    return ast.unparse(tree)


@dataclass(frozen=True)
class Site:
    module: str
    unit: str
    family: str
    index: int  # position among this unit's sites of this family
    buggy: str  # the unit's source with the bug

    @property
    def key(self) -> str:
        return f"{self.module}/{self.unit}/{self.family}/{self.index}"

    @property
    def split(self) -> str:
        h = int(hashlib.sha256(self.key.encode()).hexdigest(), 16)
        return "test" if h % 100 < TEST_SHARE else "train"


@functools.cache
def catalogue() -> tuple[Site, ...]:
    """Every bug site of the library whose mutant parses, differs, and changes at most 4 lines."""
    sites = []
    for module in LIBRARY:
        for unit, src in _units(module).items():
            for family in MUTATIONS:
                for k, site in enumerate(_sites(ast.parse(src), family)):
                    try:
                        buggy = _apply(src, site)
                        ast.parse(buggy)
                    except (SyntaxError, IndexError, KeyError):
                        continue
                    changed = sum(1 for line in difflib.ndiff(src.splitlines(), buggy.splitlines())
                                  if line[:1] in "+-")
                    if ast.dump(ast.parse(buggy)) != ast.dump(ast.parse(src)) and changed <= 8:
                        sites.append(Site(module, unit, family, k, buggy))
    return tuple(sites)


# --- building a task from its spec -------------------------------------------------------------

_ID = re.compile(r"^composer-embedded__(?P<pkg>[a-z]+)-(?P<split>[a-z]+)-s(?P<seed>\d+)"
                 r"-m(?P<m>\d+)f(?P<f>\d+)d(?P<d>\d+)-x(?P<x>[0-9a-f]+)$")


@dataclass(frozen=True)
class _Spec:
    task_seed: int
    split: str
    difficulty: Difficulty


@dataclass
class _Task:
    spec: _Spec
    site: Site
    pkg: str
    base: dict[str, str]  # buggy tree without tests: path -> text
    gold_file: tuple[str, str]  # (path, fixed text)
    tests: dict[str, str]  # test files: path -> text
    cases: dict[str, tuple]  # node id -> (module, unit, setup, expr, expected)

    @property
    def instance_id(self) -> str:
        d = self.spec.difficulty
        mask = sum(1 << i for i, f in enumerate(MUTATIONS) if f in d.families)
        return (f"composer-embedded__{self.pkg}-{self.spec.split}-s{self.spec.task_seed}"
                f"-m{d.n_modules}f{d.n_functions}d{d.distractors}-x{mask:02x}")


def _check(difficulty: Difficulty, split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not 1 <= difficulty.n_modules <= len(LIBRARY) or difficulty.n_functions < 1 or difficulty.distractors < 0:
        raise ValueError(f"bad difficulty {difficulty}: need 1 <= n_modules <= {len(LIBRARY)}, "
                         "n_functions >= 1, distractors >= 0")
    unknown = set(difficulty.families) - set(MUTATIONS)
    if unknown or not difficulty.families:
        raise ValueError(f"families must be a non-empty subset of {MUTATIONS}, got {difficulty.families}")


def _build(spec: _Spec) -> _Task:
    d = spec.difficulty
    rng = random.Random(spec.task_seed)
    pool = {f: [s for s in catalogue() if s.family == f and s.split == spec.split] for f in MUTATIONS}
    families = [f for f in MUTATIONS if f in d.families and pool[f]]
    site = rng.choice(pool[rng.choice(families)])
    others = [m for m in LIBRARY if m != site.module]
    modules = [m for m in LIBRARY if m in {site.module, *rng.sample(others, d.n_modules - 1)}]
    chosen = {}
    for m in modules:
        units = list(_units(m))
        rest = [u for u in units if u != site.unit]
        k = min(d.n_functions, len(units)) - (m == site.module)
        picked = set(rng.sample(rest, k)) | ({site.unit} if m == site.module else set())
        chosen[m] = [u for u in units if u in picked]
    spare = [(m, u) for m in modules for u in _units(m) if u not in chosen[m]]
    distract = set(rng.sample(spare, min(d.distractors, len(spare))))

    pkg = LIBRARY[site.module][0]
    base = {"README.md": f"# {pkg}\n\nSmall pure-Python helpers ({', '.join(modules)}).\n",
            "pyproject.toml": f'[project]\nname = "{pkg}"\nversion = "0.1.0"\n\n'
                              '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
            f"{pkg}/__init__.py": f'"""{pkg}: small pure-Python helpers."""\n'}
    tests, cases = {}, {}
    for m in modules:
        units = [u for u in _units(m) if u in chosen[m] or (m, u) in distract]
        src = {u: _units(m)[u] for u in units}
        path = f"{pkg}/{m}.py"
        if m == site.module:
            gold_text = _module_text(m, src)
            src[site.unit] = site.buggy
        base[path] = _module_text(m, src)
        text, file_cases = _test_file(pkg, m, chosen[m])
        tests[f"tests/test_{m}.py"] = text
        cases.update({f"tests/test_{m}.py::{name}": c for name, c in file_cases.items()})
    return _Task(spec, site, pkg, base, (f"{pkg}/{site.module}.py", gold_text), tests, cases)


def _module_text(module: str, units: dict[str, str]) -> str:
    return f'"""{LIBRARY[module][1]}"""\n\n\n' + "\n\n\n".join(units.values()) + "\n"


def library_sources() -> dict[str, str]:
    """{"package/module.py": correct source} of every library module, laid out as a task repo lays it out.

    The code every task is cut from, without bugs: the offline models' stand-in for the code a real
    base model saw in pretraining (composer.zoo). Tasks differ from it by their one injected bug."""
    return {f"{pkg}/{m}.py": _module_text(m, _units(m)) for m, (pkg, _, _, _) in LIBRARY.items()}


def _test_file(pkg: str, module: str, units: list[str]) -> tuple[str, dict]:
    funcs, cases, uses_raises = [], {}, False
    for unit in units:
        expected = _expected(module, unit)
        for k, (case, (kind, value)) in enumerate(zip(LIBRARY[module][3][unit], expected, strict=True), 1):
            setup, expr = _case(case)
            name = f"test_{unit.lower()}_{k}"
            body = [f"    {s}" for s in setup]
            if kind == "raise":
                uses_raises = True
                body += [f"    with pytest.raises({value}):", f"        {expr}"]
            else:
                assert ast.literal_eval(repr(value)) == value, f"{module}.{unit} case {k}: not a literal"
                op = "is" if value is None or isinstance(value, bool) else "=="
                body.append(f"    assert {expr} {op} {value!r}")
            funcs.append(f"def {name}():\n" + "\n".join(body) + "\n")
            cases[name] = (module, unit, setup, expr, (kind, value))
    header = ("import pytest\n\n" if uses_raises else "") + f"from {pkg}.{module} import {', '.join(units)}\n"
    return header + "\n\n" + "\n\n".join(funcs), cases


# --- hashes and diffs -----------------------------------------------------------------------


def _tree_hash(files: dict[str, str]) -> str:
    h = hashlib.sha1()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()


def _blob(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _git_diff(old: dict[str, str], new: dict[str, str]) -> str:
    """A git-style unified diff (applies with `patch -p1` and `git apply`)."""
    out = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        if a is None:
            out.append(f"new file mode 100644\nindex 0000000..{_blob(b)}\n")
        elif b is None:
            out.append(f"deleted file mode 100644\nindex {_blob(a)}..0000000\n")
        else:
            out.append(f"index {_blob(a)}..{_blob(b)} 100644\n")
        old_name, new_name = "/dev/null" if a is None else f"a/{path}", "/dev/null" if b is None else f"b/{path}"
        out += difflib.unified_diff((a or "").splitlines(True), (b or "").splitlines(True), old_name, new_name)
    return "".join(out)


def _changed_lines(diff: str) -> list[str]:
    return [line[1:].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()]


# --- records ----------------------------------------------------------------------------------


def _record(task: _Task, f2p: list[str], p2p: list[str], statement: str) -> dict:
    path, gold = task.gold_file
    created = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=task.spec.task_seed % (366 * 86400))
    rec = {
        "instance_id": task.instance_id,
        "repo": REPO_PREFIX + task.pkg,
        "base_commit": _tree_hash(task.base),
        "patch": _git_diff({path: task.base[path]}, {path: gold}),
        "test_patch": _git_diff({}, task.tests),
        "problem_statement": statement,
        "hints_text": "",
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "version": GENERATOR_VERSION,
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": hashlib.sha1(f"composer-embedded {GENERATOR_VERSION}".encode()).hexdigest(),
    }
    assert tuple(rec) == SCHEMA_FIELDS
    return rec


def _spec_of(instance: dict) -> _Spec:
    iid = instance.get("instance_id", "?")
    m = _ID.match(iid)
    if not str(instance.get("repo", "")).startswith(REPO_PREFIX) or not m:
        raise ValueError(f"{iid}: not an embedded task (repo {instance.get('repo')!r}); a real SWE-bench repo needs "
                         "its instance image: CodingEnv runs it in a container (composer.env.container)")
    families = tuple(f for i, f in enumerate(MUTATIONS) if int(m["x"], 16) >> i & 1)
    d = Difficulty(int(m["m"]), int(m["f"]), families, int(m["d"]))
    _check(d, m["split"])
    return _Spec(int(m["seed"]), m["split"], d)


def describe(instance: dict) -> dict:
    """What an embedded record's bug is (for per-family breakdowns; never show this to a policy)."""
    task = _build(_spec_of(instance))
    s = task.site
    return {"family": s.family, "module": s.module, "unit": s.unit, "site": s.key, "split": task.spec.split,
            "task_seed": task.spec.task_seed, "difficulty": task.spec.difficulty}


def _write(files: dict[str, str], dest: Path) -> None:
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def materialize(instance: dict, dest: Path, *, with_tests: bool = True) -> Path:
    """Write the repo at base_commit into dest (new or empty) and, with_tests, apply test_patch.

    with_tests=False gives what a SWE-bench agent sees (the harness adds the tests after the
    model patch). ValueError for a non-embedded record or one whose base_commit does not
    match the rebuilt tree (tampered, or made by another generator version)."""
    task = _build(_spec_of(instance))
    if _tree_hash(task.base) != instance.get("base_commit"):
        raise ValueError(f"{instance['instance_id']}: base_commit {instance.get('base_commit')} does not match the "
                         f"rebuilt tree {_tree_hash(task.base)} (tampered record or generator version mismatch)")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    _write(task.base, dest)
    if with_tests:
        sandbox.apply_unified_diff(dest, instance["test_patch"])
    return dest


def gold_repo(instance: dict, dest: Path) -> Path:
    """materialize + the gold patch."""
    materialize(instance, dest)
    sandbox.apply_unified_diff(dest, instance["patch"])
    return dest


def save_jsonl(instances, path) -> None:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in instances))


def load_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# --- generation with validation -------------------------------------------------------------


PROBE = """import json, sys
out = []
for imp, setup, expr in json.loads(sys.argv[1]):
    ns = {}
    try:
        exec(imp, ns)
        for stmt in setup:
            exec(stmt, ns)
        out.append(["ok", repr(eval(expr, ns))])
    except Exception as e:
        out.append(["raise", type(e).__name__, str(e)])
print()
print(json.dumps(out))
"""


def _validate(spec: _Spec) -> dict | None:
    """The task's record if it validates in the sandbox, else None."""
    task = _build(spec)
    provisional = _record(task, [], [], "")
    with tempfile.TemporaryDirectory(prefix="composer-task-") as tmp:
        buggy = materialize(provisional, Path(tmp) / "buggy")
        gold = gold_repo(provisional, Path(tmp) / "gold")
        runs = [sandbox.run_pytest(repo, [], timeout_s=VALIDATION_TIMEOUT_S) for repo in (buggy, gold)]
        if any(r.error for r in runs) or set(runs[1].outcomes) != set(task.cases) or not all(runs[1].outcomes.values()):
            return None
        ids = list(task.cases)
        f2p = [t for t in ids if not runs[0].outcomes.get(t, False)]
        p2p = [t for t in ids if runs[0].outcomes.get(t, False)]
        if not f2p or any(task.cases[t][1] != task.site.unit for t in f2p):
            return None
        probe = [(f"from {task.pkg}.{task.site.module} import {task.site.unit}", list(task.cases[t][2]),
                  task.cases[t][3]) for t in f2p[:2]]
        rc, out, timed_out = sandbox.run_python(buggy, ["-c", PROBE, json.dumps(probe)],
                                                timeout_s=VALIDATION_TIMEOUT_S)
        if rc != 0 or timed_out:
            return None
        actual = json.loads(out.strip().splitlines()[-1])
    statement = _statement(task, [task.cases[t] for t in f2p[:2]], actual)
    record = _record(task, f2p, p2p, statement)
    if any(len(line) >= 4 and line in statement for line in _changed_lines(record["patch"])):
        return None
    return record


def _statement(task: _Task, cases: list[tuple], actual: list[list]) -> str:
    rng = random.Random(f"statement/{task.spec.task_seed}")
    module, unit = task.site.module, task.site.unit
    qual = f"{task.pkg}.{module}.{unit}"

    def clip(text):
        return text if len(text) <= 200 else text[:200] + "..."

    def phrases(case, got):
        _, _, setup, expr, (kind, value) = case
        want = f"raise `{value}`" if kind == "raise" else f"return `{clip(repr(value))}`"
        have = f"returns `{clip(got[1])}`" if got[0] == "ok" else f"raises `{got[1]}: {clip(got[2])}`"
        repro = [f">>> from {task.pkg}.{module} import {unit}"] + [f">>> {s}" for s in setup] + [f">>> {expr}"]
        repro += [clip(got[1])] if got[0] == "ok" else ["Traceback (most recent call last):", "  ...",
                                                         f"{got[1]}: {clip(got[2])}"]
        return expr, want, have, "\n".join(repro)

    expr, want, have, repro = phrases(cases[0], actual[0])
    title = rng.choice([f"`{qual}` gives a wrong result", f"Wrong result from `{qual}`",
                        f"{qual}: unexpected behaviour for some inputs", f"Bug in `{qual}`"])
    lead = rng.choice([f"`{expr}` {have}, but it should {want}.",
                       f"I expected `{expr}` to {want}, but it {have}.",
                       f"When I call `{expr}` it {have}. It should {want}."])
    parts = [title, "", lead, "", "```python", repro, "```"]
    if len(cases) > 1:
        expr2, want2, have2, _ = phrases(cases[1], actual[1])
        parts += ["", f"Another example: `{expr2}` {have2}; it should {want2}."]
    parts += ["", rng.choice(["Seen with the current main branch.", "Python 3.11, latest release.",
                              "Found while writing a small script on top of the package."])]
    return "\n".join(parts) + "\n"


def _task_seed(seed: int, split: str, i: int) -> int:
    return int(hashlib.sha256(f"{seed}/{split}/{i}".encode()).hexdigest(), 16) % 10**9


def generate(n: int, *, seed: int = 0, split: str = "train", difficulty: Difficulty | None = None,
             workers: int | None = None) -> list[dict]:
    """n validated tasks; the same arguments give byte-identical records.

    Candidates are validated `workers` at a time (default: the usable CPUs) but accepted
    strictly in seed order, so parallelism never changes the output."""
    difficulty = difficulty or Difficulty()
    _check(difficulty, split)
    # Built here, before the threads: CPython 3.11's ast.parse is not thread-safe ("AST constructor recursion
    # depth mismatch"), and a cold catalogue() would otherwise be parsed by every worker at once.
    sites = sum(s.split == split and s.family in difficulty.families for s in catalogue())
    if (difficulty.n_modules, difficulty.n_functions, difficulty.distractors) == (1, 1, 0) and n > sites:
        # Each task is then one bug site alone in its module: no more distinct tasks exist than sites (fewer, as
        # ~7% are equivalent mutants). Without this check the loop below would validate 20 * n candidates first.
        raise ValueError(f"{n} tasks asked, but the {split} split has only {sites} bug sites for {difficulty}, and "
                         "with one function per module each task is one site: ask for fewer, or raise n_functions, "
                         "n_modules or distractors")
    workers = workers or len(os.sched_getaffinity(0))
    specs = (_Spec(_task_seed(seed, split, j), split, difficulty) for j in itertools.count())
    records, seen, pending, tried = [], set(), deque(), 0
    with ThreadPoolExecutor(workers) as pool:
        while len(records) < n:
            while len(pending) < 2 * workers:
                pending.append(pool.submit(_validate, next(specs)))
                tried += 1
            rec = pending.popleft().result()
            key = rec and (rec["base_commit"], rec["patch"])
            if rec and key not in seen:
                seen.add(key)
                records.append(rec)
            if tried > 20 * n + 50:
                raise RuntimeError(f"only {len(records)}/{n} tasks validated after {tried} candidates ({difficulty})")
        for f in pending:
            f.cancel()
    return records
