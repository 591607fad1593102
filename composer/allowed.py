"""A parameter's kind and allowed-values clause, checked: the words the notebooks' parameters cells use
(composer.run reads them from each cell's comments) and the typed configs hold (composer.ab.parameters).

    from composer.allowed import allows, fits
    fits(3, "int"), fits(True, "int")        # True, False: a bool is no int here
    allows("at least 1", 0)                  # False
    allows("more than 0, at most 1", 0.5)    # True
    allows("offline | live", "live")         # True: each choice read as YAML
    allows("non-empty", [])                  # False

An allowed-values clause opens a parameter's comment: `k: int = 5  # {at least 1} calls per step`. Words, not
">=": papermill skips a parameter line holding a second "=".
"""

import operator
import re

import yaml

KINDS = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}
BOUND = re.compile(r"^(at least|at most|more than|less than)\s+(-?[0-9.]+(?:e-?[0-9]+)?)$")
BOUNDS = {"at least": operator.ge, "at most": operator.le, "more than": operator.gt, "less than": operator.lt}


def fits(value, kind) -> bool:
    """Whether value is of kind (a KINDS name; None accepts anything). An int is a float; a bool is no int."""
    if kind is None:
        return True
    if isinstance(value, bool) and kind != "bool":  # bool is an int to Python, not to us
        return False
    if kind == "float":
        return isinstance(value, (int, float))
    return isinstance(value, KINDS[kind])


def allows(clause: str, value) -> bool:
    """Whether value meets an allowed-values clause; ValueError for a clause that is none of the three forms."""
    if clause == "non-empty":
        return len(value) > 0
    if "|" in clause:
        return value in [load_yaml(choice.strip()) for choice in clause.split("|")]
    bounds = [BOUND.match(part.strip()) for part in clause.split(",")]
    if not all(bounds):
        raise ValueError(f"{{{clause}}} is not an allowed-values clause ({{at least 1}}, {{more than 0, at most 1}}, "
                         "{a | b}, {non-empty})")
    return all(BOUNDS[m.group(1)](value, float(m.group(2))) for m in bounds)


class _Loader(yaml.SafeLoader):
    """yaml.safe_load, except that 1e-3 is a float (YAML 1.1 reads it as a string)."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
                              list("-+0123456789."))


def load_yaml(text):
    """A parameter value (-p) or file, read as YAML."""
    return yaml.load(text, Loader=_Loader)
