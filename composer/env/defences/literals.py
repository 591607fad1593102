"""The literal values a test holds, and how one is moved: the rule by which canaries make a test's twins and
probes make inputs no test shows.

    from composer.env.defences import literals

    literals.literal(ast.parse("[1, 2]", mode="eval").body)   # [1, 2]; NOT_LITERAL where a node spells no literal
    literals.moved(5, random.Random(0))                       # an int one to three off 5, either way

A moved value is of the original's kind and drawn symmetrically around it (an integer one to three off either way,
a float 0.5 to 2 off, a string with one character changed, added or dropped, a list with one item changed, added or
dropped), so that of a value and its moved copies none looks more like the original: canaries
(composer.env.defences.canaries) move a compared literal, probes (composer.env.defences.probes) a call's literal
argument. Both import this module; it imports neither.
"""

import ast
import random
import string


NOT_LITERAL = object()


def literal(node):
    """The literal value a node spells (ast.literal_eval), else NOT_LITERAL."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def _same_kind_char(c: str, rng: random.Random) -> str:
    pool = next((p for p in (string.ascii_lowercase, string.ascii_uppercase, string.digits, " -_.,")
                 if c in p), string.punctuation)
    return rng.choice([x for x in pool if x != c] or [pool[0]])


def moved(value, rng: random.Random):
    """A value of value's kind that differs from it and would look as much like the original if the two were
    swapped (see the module docstring), or None where there is none (bool, None, NaN, other types)."""
    if isinstance(value, bool) or value is None or value is NOT_LITERAL:
        return None
    if isinstance(value, int):
        return value + rng.choice((-3, -2, -1, 1, 2, 3))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        step = rng.choice((-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0))
        return value + step * max(1.0, abs(value) * 1e-9)  # a step that a float this big can hold
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        at = rng.randrange(len(text) + 1)
        near = text[min(at, len(text) - 1)] if text else "a"
        how = rng.choice(["change", "add", "drop"] if len(text) > 1 else ["change", "add"] if text else ["add"])
        if how == "change":
            at = min(at, len(text) - 1)
            text = text[:at] + _same_kind_char(text[at], rng) + text[at + 1:]
        elif how == "add":
            text = text[:at] + _same_kind_char(near, rng) + text[at:]
        else:
            at = min(at, len(text) - 1)
            text = text[:at] + text[at + 1:]
        return text.encode("latin-1") if isinstance(value, bytes) else text
    if isinstance(value, (list, tuple)):
        items = list(value)
        changeable = [i for i, item in enumerate(items) if moved(item, rng) is not None]
        hows = (["change"] if changeable else []) + (["drop"] if len(items) > 1 else []) + (["add"] if items else [])
        if not hows:
            return type(value)([rng.randint(1, 9)])
        how = rng.choice(hows)
        if how == "change":
            at = rng.choice(changeable)
            items[at] = moved(items[at], rng)
        elif how == "drop":
            del items[rng.randrange(len(items))]
        else:
            base = rng.choice(items)
            items.insert(rng.randrange(len(items) + 1), moved(base, rng) if moved(base, rng) is not None else base)
        return type(value)(items) if type(value)(items) != value else None
    if isinstance(value, dict):
        changeable = [k for k, v in value.items() if moved(v, rng) is not None]
        if not changeable:
            return None
        key = rng.choice(changeable)
        return {**value, key: moved(value[key], rng)}
    if isinstance(value, set):
        ints = sorted(v for v in value if isinstance(v, int) and not isinstance(v, bool))
        if len(ints) != len(value) or not ints:
            return None
        return value - {rng.choice(ints)} if len(ints) > 1 and rng.random() < 0.5 else \
            value | {rng.choice((ints[0] - rng.randint(1, 3), ints[-1] + rng.randint(1, 3)))}
    return None
