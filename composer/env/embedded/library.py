"""The template library embedded tasks are cut from: small modules of pure functions and classes, each with the
calls its tests make, and what the correct code returns for them.

    from composer.env.embedded import library

    library.LIBRARY["ops"]                    # (package, module docstring, source, cases)
    library.units("ops")                      # {"clamp": "def clamp(x, lo, hi): ...", ...}: canonical sources
    library.expected("ops", "mean")           # (("ok", 2.0), ("raise", "ValueError"), ...) per case

Every top-level def/class of a module is a "unit"; a case is a call expression, or a tuple of setup statements
ending in the expression. Expected values come from running this (trusted) source; sources are canonicalized with
ast.unparse at load so that unparsing a mutated tree changes only the mutated spot (composer.env.embedded.mutations).
"""

import ast
import functools

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
def units(module: str) -> dict[str, str]:
    """Canonical source of each unit of a library module, in library order."""
    tree = ast.parse(LIBRARY[module][2])
    return {node.name: ast.unparse(node) for node in tree.body}


@functools.cache
def gold_namespace(module: str) -> dict:
    ns = {}
    exec(compile("\n\n".join(units(module).values()), f"<library {module}>", "exec"), ns)
    return ns


def split_case(case) -> tuple[tuple[str, ...], str]:
    """(setup statements, expression)."""
    return ((), case) if isinstance(case, str) else (tuple(case[:-1]), case[-1])


@functools.cache
def expected(module: str, unit: str) -> tuple:
    """Per case ("ok", value) or ("raise", exception name), from the gold library."""
    out = []
    for case in LIBRARY[module][3][unit]:
        setup, expr = split_case(case)
        ns = dict(gold_namespace(module))
        try:
            for stmt in setup:
                exec(stmt, ns)
            out.append(("ok", eval(expr, ns)))
        except Exception as e:  # the library's documented errors (ValueError on empty input, ...)
            out.append(("raise", type(e).__name__))
    return tuple(out)


