"""Bug injection for embedded tasks: AST mutations that read like human slips, and the catalogue of bug sites.

    from composer.env.embedded import mutations

    mutations.catalogue()          # every Site (module, unit, family, index, buggy source) of the library
    site.split                     # "train" or "test": a site belongs to one split by a fixed hash

A site is (node index in ast.walk order, action); applying it to a fresh parse of the unit and unparsing gives the
buggy unit. Each family is a small rule set meant to read like a human slip, not a random token flip. Train/test
disjointness is by site: TEST_SHARE percent of the sites belong to the test split.
"""

import ast
import copy
import difflib
import functools
import hashlib
from dataclasses import dataclass

from composer.env.embedded.library import LIBRARY, units

MUTATIONS = ("operator", "comparison", "off_by_one", "constant", "swapped_args", "wrong_variable",
             "missing_branch", "wrong_return")
TEST_SHARE = 25  # percent of bug sites that belong to the test split


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
        for unit, src in units(module).items():
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


