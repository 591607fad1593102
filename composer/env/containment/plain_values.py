"""Plain values for a grading run: a result whose comparisons are rigged must not pass a test that its plain value
would fail, wherever the test compares it (`==`, a helper, `pytest.approx`, unittest's assertEqual, sorted(),
set()). composer.env.containment.sandbox writes this file's text beside the outcome plugin
(composer/env/containment/sandbox_plugin.py) as `_composer_plain_values_<suffix>.py`, and the plugin imports it in
grading runs only; it imports nothing of composer.

Once the test modules are imported, every function and method written in the code under test (modules of the
repository that are not tests or conftest.py; a class it only imported, urllib3's PoolManager, is left as it is)
is wrapped: what it returns, the arguments it was given and the attributes of the instance it ran on are made
plain before the test sees them. A value is made plain when it is an instance of a subclass of a builtin value
type (int, float, complex, str, bytes, list, tuple, dict, set, frozenset) that changes any of its behaviour through
a method the repository defined or re-pointed: it becomes the builtin value it holds, read through the builtin
type's own methods (captured here, before any code of the repository runs), its items made plain in turn.
Subclasses that only add fields or reuse the library's own methods (namedtuples, enums, Counter), and the base's
own (flask's Config), keep their type. A value of a class that neither the base commit (COMPOSER_SANDBOX_KNOWN_CLASSES:
"module:qualname" of each class in its source files) nor a test module defines, and that has comparison or
conversion methods of its own, and unittest.mock's ANY or a mock told to equal what it meets, become a value that
equals nothing; a mock left as it is stays (tests hand mocks to the code and get them back). Which module is a test
and which class the base, a test or a library wrote is told from the import system's own record (_Recorder: the
module object each loader executed, the file it was found at, the classes its run defined) and from the functions'
globals and code (a test's own function holds a code object of its module's own code, seen by an audit hook as the
import system runs it: not one compiled into the test's namespace later), never from a module's __file__ or
__name__ or a class's __module__, which the code under test can assign:
a class posing as a test's or a library's is the repository's. The library's classes are those that existed when
this module was imported, before any code of the repository ran, and those a library module loaded later from the
Python installation defined (a file under its prefixes that nothing changed since the run began: never a module
the run wrote, in its /tmp or anywhere), none of their methods written in the repository (pandas' Index). A test
module is one found there as it is before the run began, never one the run added to the repository's folders. What
this cannot see (a changed comparison method of a class the base has, code that rebinds the tests' names, modules
first imported inside a test, a function it compiles into a library module's namespace, and before Python 3.8 into
a test's) the canaries catch (composer.env.defences.canaries). Checked on real libraries' own suites
(docs/sandbox.md): the wrapping changes no outcome of requests' 606 tests, marshmallow 3's 1,114 or sphinx's 162, one
of flask's 482 (a class made inside a function, posing as werkzeug's) and one of xarray's 218 (it counts stack
frames); with the import record, none of marshmallow 2.20's 779 in its SWE-bench image.
"""

import json
import os
import sys
import tempfile
import types

_ROOT = os.getcwd() + os.sep

# Read through the type's own descriptors, never through attributes an instance or a metaclass could override.
_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_bases = type.__dict__["__bases__"].__get__
_type_flags = type.__dict__["__flags__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_setattr = type.__setattr__
_type_subclasses = type.__dict__["__subclasses__"]
_object_dict = object.__getattribute__
_HEAPTYPE = 1 << 9
_FunctionType, _GeneratorType, _ModuleType = types.FunctionType, types.GeneratorType, types.ModuleType
_CodeType = types.CodeType
_COPY = {
    int: int.__int__, float: float.__float__, str: str.__str__,
    bytes: lambda v: bytes.__getitem__(v, slice(None)),  # not bytes.__bytes__: Python 3.11+, and real images run older
    complex: lambda v: complex(complex.real.__get__(v), complex.imag.__get__(v)),
    list: list.copy, dict: dict.copy, set: set.copy, frozenset: frozenset.copy,
    tuple: lambda v: tuple.__getitem__(v, slice(None)),
}
_BUILTINS = tuple(_COPY)  # bool is final: never a base here
_EXACT = frozenset({int, float, complex, str, bytes, bool, type(None)})
# Class attributes that cannot change how an instance compares, hashes, iterates or converts.
_SAFE = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__init__",
                   "__new__", "__init_subclass__", "__annotations__", "__match_args__", "__getnewargs__",
                   "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__", "__getstate__", "__setstate__",
                   "__orig_bases__", "__parameters__", "__set_name__", "__class_getitem__", "__del__",
                   "__setattr__", "__delattr__", "__setitem__", "__delitem__", "__dir__", "__sizeof__"})
_MAPPING_NAMES = frozenset({"keys", "values", "items", "get"})  # what pytest.approx and others read of a mapping
_TEXT_SLOTS = ("__str__", "__repr__", "__format__")
# Methods wrapped on the code under test's classes: all but those that build, tear down or route attribute access.
_UNWRAPPED = frozenset({"__init__", "__new__", "__init_subclass__", "__set_name__", "__class_getitem__", "__del__",
                        "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__get__", "__set__",
                        "__delete__", "__subclasshook__"})
_rigged_types: dict = {}
_seen_modules: set = set()  # every module name a sweep looked at
_guarded_classes: set = set()
_wrapped: dict = {}  # guarded wrapper -> the function it wraps (its code tells where it was written)


class _Unequal:
    """Stands in for a value that equals anything (unittest.mock.ANY): equals nothing but itself."""

    def __repr__(self):
        return "<a value that equalled anything>"


def _inside(path) -> bool:
    return type(path) is str and os.path.abspath(path).startswith(_ROOT)


# The files the agent's diff changed or added (COMPOSER_SANDBOX_CHANGED, repository-relative): grading keeps its
# changes to library files named like tests (django/test/, pylint/testutils/lint_module_test.py), so a name says
# nothing about who wrote such a file.
_CHANGED = frozenset(json.loads(os.environ.pop("COMPOSER_SANDBOX_CHANGED", "[]")))


def _disk_clock_ns() -> int:
    """The file systems' clock now, as a file's ctime reads it (the kernel's clock for inodes, which may lag
    time.time() by a tick): the ctime of a file made in this run's own temporary folder."""
    fd, path = tempfile.mkstemp()
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(path)


# Taken as this module is imported, before any code of the repository runs: a file whose inode changed since (written,
# moved, its mode or times set) is this run's.
_BEGUN_NS = _disk_clock_ns()
_PREFIXES = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                          sys.base_exec_prefix)})


def _installed(path) -> bool:
    """A file of the Python installation (under its prefixes: the standard library, site-packages) that nothing
    changed since the run began: a library's. A module the run wrote and imported, in its /tmp or a folder it put
    on sys.path (or into a site-packages it can write: plain mode, a container's root), is the code under test's."""
    if type(path) is not str:
        return False
    real = os.path.realpath(path)
    try:
        return real.startswith(_PREFIXES) and os.stat(real).st_ctime_ns < _BEGUN_NS
    except OSError:
        return False


def _named_as_test(rel: list) -> bool:
    """A repository-relative path (its parts) named as tests are: conftest.py, a test_*.py or *_test.py file, or any
    file under a tests/, test/ or testing/ folder."""
    name = rel[-1]
    return name == "conftest.py" or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py") \
        or any(part in ("tests", "test", "testing") for part in rel[:-1])


def _test_files() -> dict:
    """{path: (inode, ctime)} of the repository's Python files named as tests, as they are before any code of it
    runs: where a run may add files to the repository (a real instance's folders are open to it, as its suite
    writes into them) one it adds, or rewrites, is not among them."""
    found = {}
    for folder, subfolders, files in os.walk(_ROOT):
        subfolders[:] = [d for d in subfolders if d != ".git"]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and _named_as_test(os.path.relpath(path, _ROOT).split(os.sep)):
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                found[path] = (st.st_ino, st.st_ctime_ns)
    return found


_TEST_FILES = _test_files()


class _Recorder:
    """The import system's own account of each module: first on sys.meta_path from when this module is imported
    (before any code of the repository runs), it asks the finders after it for every import's spec and wraps its
    loader, so that the module object a loader executes is recorded with the file it was found at, and, once it ran,
    the classes it defined there. Which module is a test, and which class the base or a test wrote, is told from this
    record, keyed by the objects themselves: a module's __file__ and __name__ and a class's __module__ are values the
    code under test can assign, and a module made by hand or loaded past the import system is
    never a test."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not cls and find is not None else None
            if spec is not None:
                if spec.origin and spec.has_location and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RecordingLoader(spec.loader, os.path.abspath(spec.origin))
                return spec
        return None


class _RecordingLoader:
    """A loader as it was found, that records the module it executes (see _Recorder); all else is the loader's."""

    def __init__(self, loader, origin):
        self._loader, self._origin = loader, origin

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        _LOADED[id(module)] = (module, self._origin)
        test = _test_module(module)
        if test:
            _TEST_NAMESPACES.add(id(_object_dict(module, "__dict__")))
            _EXPECTED.append(self._origin)  # its code objects: the first exec of code from this file (_audit)
        if _installed(self._origin) and not _inside(self._origin):
            _LIBRARY_NAMESPACES[id(_object_dict(module, "__dict__"))] = _object_dict(module, "__dict__")
        name = _object_dict(module, "__dict__").get("__name__")  # the import system's, before the module's code runs
        try:
            self._loader.exec_module(module)
        finally:
            if test and self._origin in _EXPECTED:  # no exec seen (a loader that runs code otherwise): none trusted
                _EXPECTED.remove(self._origin)
        _record_classes(module, self._origin, name)


_LOADED: dict = {}  # id(module) -> (module, the file the import system loaded it from)
_TEST_NAMESPACES: set = set()  # id() of the test modules' namespaces (kept alive by _LOADED)
_TEST_CODES: dict = {}  # id -> every code object a test module's own code holds (its functions', nested ones too)
_EXPECTED: list = []  # test files being loaded, whose module code has not run yet


def _audit(event, args) -> None:
    """Record the code objects of a test module as the import system runs it: the first code object exec'd from the
    file of a test module being loaded is that module's (a loader compiles and execs it before any of its code runs),
    and every function the module's code defines holds one of its constants. A function compiled later into a test's
    namespace (exec(source, test_module.__dict__)) has that namespace as its globals but none of these codes."""
    if event == "exec" and _EXPECTED and type(args[0]) is _CodeType:
        origin = os.path.abspath(args[0].co_filename)
        if origin in _EXPECTED:
            _EXPECTED.remove(origin)
            stack = [args[0]]
            while stack:
                code = stack.pop()
                _TEST_CODES[id(code)] = code
                stack += [c for c in code.co_consts if type(c) is _CodeType]


_DEFINED: dict = {}  # id(class) -> (class, that file, "module:qualname" as it was when its module had run)


def _record_classes(module, origin, name) -> None:
    """The classes a module's own run left in it under `name`, the one the import system loaded it as (a class another
    module made, imported here, says another __module__, and so does one made after the module rebound its
    __name__), nested ones too; code that runs later cannot add one."""
    stack = [value for value in list(_object_dict(module, "__dict__").values()) if issubclass(type(value), type)]
    while stack:
        cls = stack.pop()
        if _type_module(cls) == name and id(cls) not in _DEFINED:
            _DEFINED[id(cls)] = (cls, origin, f"{name}:{_type_qualname(cls)}")
            stack += [value for value in _type_dict(cls).values() if issubclass(type(value), type)]


def _origin(module):
    """The file the import system loaded `module` from, whatever it says of itself now; None when it did not."""
    found = _LOADED.get(id(module))
    return found[1] if found is not None and found[0] is module else None


def _test_module(module) -> bool:
    """A module the import system loaded from a test file of the base's or the test patch's (see _test_side)."""
    path = _origin(module)
    return path is not None and _inside(path) and _test_side(path)


def _test_side(path: str) -> bool:
    """Tests and conftest.py, named as tests are (_named_as_test), that the agent did not change and the run did not
    write (there, as they are, before any code of the repository ran: _TEST_FILES): the base's and the test
    patch's, so they are trusted."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, _ROOT).split(os.sep)
    try:
        st = os.stat(path)
    except OSError:
        return False
    return "/".join(rel) not in _CHANGED and _named_as_test(rel) and _TEST_FILES.get(path) == (st.st_ino,
                                                                                                st.st_ctime_ns)


def _classes() -> dict:
    """{id: class} of every class that exists now: before any code of the repository ran, all of them library's."""
    found, stack = {}, [object]
    while stack:
        for sub in _type_subclasses(stack.pop()):
            if id(sub) not in found:
                found[id(sub)] = sub
                stack.append(sub)
    return found


_LIBRARY = _classes()
# id -> namespace of every module there before any code of the repository ran, and of those loaded from outside it
_LIBRARY_NAMESPACES = {id(m.__dict__): m.__dict__ for m in list(sys.modules.values()) if isinstance(m, _ModuleType)}
sys.meta_path.insert(0, _Recorder)
_AUDITED = hasattr(sys, "addaudithook")  # Python 3.8+; an older image's Python trusts a test's globals alone
if _AUDITED:
    sys.addaudithook(_audit)
_KNOWN = frozenset(json.loads(os.environ.pop("COMPOSER_SANDBOX_KNOWN_CLASSES", "[]")))  # "module:qualname"


def _known(cls) -> bool:
    """A class of the base commit's source: one a repository module defined under a name of the base's classes, as
    the import system recorded it; or one a test wrote (the tests come from the base and the test patch: real test
    suites define classes of their own, a Schema subclass inside a test function): every callable of its own that
    could rig a comparison is a function made in a test module (its globals that module's namespace: a function's
    __globals__ cannot be reassigned; its code one the module's own code holds: _audit), and each of its bases is
    the library's or known. Never from the class's __module__ or __qualname__, which any class can set to a test's or
    the base's names."""
    made = _DEFINED.get(id(cls))
    if made is not None and made[0] is cls and _inside(made[1]) and made[2] in _KNOWN:
        return True
    own = [_function_of(value) for name, value in _type_dict(cls).items()
           if _rigs(name) and (callable(value) or type(value) in (staticmethod, classmethod, property))]
    if any(f is None or id(f.__globals__) not in _TEST_NAMESPACES
           or _AUDITED and _TEST_CODES.get(id(f.__code__)) is not f.__code__ for f in own):  # data (ABC's): no rigging
        return False
    bases = [b for b in _type_bases(cls) if not _library_class(b)]  # a test's Schema subclass: the base's Schema
    return bool(own or bases) and all(_known(b) for b in bases)


def _rigs(name: str) -> bool:
    """A class attribute that can change how an instance compares, hashes, iterates or converts."""
    return name.startswith("__") and name not in _SAFE or name in _MAPPING_NAMES


def _function_of(value):
    """The function a class attribute is or holds (staticmethod, classmethod, property; plain values' wrapper
    unwrapped), else None."""
    func = value.fget if type(value) is property else value.__func__ if type(value) in (staticmethod, classmethod) \
        else value
    func = _wrapped.get(func, func) if type(func) is _FunctionType else func
    return func if type(func) is _FunctionType else None


def _library_class(cls) -> bool:
    """A class that no code of the repository made: builtin, there before the repository's code ran, or defined by a
    module the import system loaded from a file outside the repository (_Recorder), none of its methods written in
    the repository (a library the code under test imported later: urllib3's HTTPResponse, pandas' Index). A class
    that only says it comes from elsewhere, by its __module__, even planted in that module or in a module made by
    hand whose __file__ says it is outside, is the repository's."""
    if not _type_flags(cls) & _HEAPTYPE or id(cls) in _LIBRARY:
        return True
    if any(_own_code(value) for value in _type_dict(cls).values()):
        return False
    made = _DEFINED.get(id(cls))
    return made is not None and made[0] is cls and not _inside(made[1]) and _installed(made[1])


def _library_member(cls, base, name, value) -> bool:
    """A class attribute that behaves as the library made it: the base's own slot, or a function a library module
    made (its globals that module's namespace: never a module made by hand, nor a code object's filename, which
    compile() sets to anything) that was written as this very method (namedtuple's __repr__)."""
    if value is _type_dict(base).get(name) or value is _type_dict(object).get(name):
        return True
    if name in _TEXT_SLOTS and any(value is _type_dict(t).get(s) for t in (base, object) for s in _TEXT_SLOTS):
        return True
    func = value.__func__ if type(value) in (staticmethod, classmethod) else value
    if type(func) is not _FunctionType:
        return False
    return (id(func.__globals__) in _LIBRARY_NAMESPACES and func.__code__.co_name == name
            and func.__qualname__ == f"{_type_qualname(cls)}.{name}")


def _rigged(cls, base) -> bool:
    """Whether a subclass of a builtin changes how its instances compare, hash, iterate or convert."""
    if cls not in _rigged_types:
        _rigged_types[cls] = any(
            not _library_member(c, base, name, value)
            for c in _type_mro(cls) if c is not base and c is not object and not _library_class(c)
            for name, value in _type_dict(c).items() if _rigs(name))
    return _rigged_types[cls]


def _mock_rigged(value):
    """None for a value that is no mock; else whether it is unittest.mock's ANY or a mock told to equal what it meets
    (`m.__eq__ = ...`, `m.__eq__.return_value = True`). A mock left as it is equals only itself (each has a class of
    its own, a MagicMock's full of magic methods), and tests hand such mocks to the code under test and get them
    back."""
    mock = sys.modules.get("unittest.mock")
    if type(mock) is not _ModuleType:
        return None
    mro = _type_mro(type(value))
    if type(mock.ANY) in mro:
        return True
    if mock.NonCallableMock not in mro:
        return None
    for name, default in (("__eq__", mock._get_eq), ("__ne__", mock._get_ne)):
        slot = _type_dict(type(value)).get(name)  # each mock has a class of its own
        if slot is None:
            continue  # NonCallableMock's own: identity
        child = _object_dict(value, "__dict__").get("_mock_children", {}).get(name)
        if type(slot) is not mock.MagicProxy and slot is not child:  # MagicMock's, before and after first use
            return True
        if child is not None and (_object_dict(child, "__dict__").get("_mock_return_value") is not mock.DEFAULT
                                  or getattr(_object_dict(child, "__dict__").get("_mock_side_effect"), "__code__",
                                             None) is not default(None).__code__):
            return True
    return False


def plain(value, _seen=None):
    """The value as a test may safely compare it (see the module docstring)."""
    cls = type(value)
    if cls in _EXACT:
        return value
    seen = {} if _seen is None else _seen
    if id(value) in seen:
        return seen[id(value)]
    base = next((b for b in _BUILTINS if b in _type_mro(cls)), None)
    if base is None:
        rigged = _mock_rigged(value)
        if rigged is not None:
            return _Unequal() if rigged else value
        if not _library_class(cls) and not _known(cls) and _rigged(cls, object):
            return _Unequal()  # a class the base does not define, with comparisons of its own
        if cls in _guarded_classes:
            seen[id(value)] = value  # objects of the code under test that point at each other (a context, its app)
            _plain_attributes(value, seen)
        return value
    if cls is not base and (not _rigged(cls, base) or _known(cls)):
        return value  # the base's own subclasses (flask's Config, SecureCookieSession) are as the base made them
    copy = _COPY[base](value) if cls is not base else value
    seen[id(value)] = copy
    if base is list:
        for i, item in enumerate(list.copy(copy)):
            made = plain(item, seen)
            if made is not item:
                list.__setitem__(copy, i, made)
    elif base is dict:
        items = [(plain(k, seen), plain(v, seen)) for k, v in dict.items(copy)]
        if any(a is not k or b is not v for (a, b), (k, v) in zip(items, dict.items(copy))):
            dict.clear(copy)
            dict.update(copy, items)
    elif base in (tuple, set, frozenset):
        items = list(copy)
        made = [plain(item, seen) for item in items]
        if any(a is not b for a, b in zip(made, items)):
            if copy is value and base is set:  # an exact set the caller holds: made plain where it is
                set.clear(copy)
                set.update(copy, made)
            else:
                copy = base(made)
    return copy


def _plain_attributes(obj, seen) -> None:
    try:
        attributes = _object_dict(obj, "__dict__")
    except AttributeError:
        return
    if type(attributes) is dict:
        for key, item in list(attributes.items()):
            made = plain(item, seen)
            if made is not item:
                attributes[key] = made


def _plain_in_place(arg, seen) -> None:
    """An argument the code under test may have filled with rigged values (a list it appended to, self)."""
    cls = type(arg)
    if cls in (list, dict, set):
        plain(arg, seen)
    elif cls in _guarded_classes:
        _plain_attributes(arg, seen)


def _guard(func):
    def guarded(*args, **kwargs):
        result = func(*args, **kwargs)
        seen = {}
        for arg in (*args, *kwargs.values()):
            _plain_in_place(arg, seen)
        if type(result) is _GeneratorType:
            return (plain(item) for item in result)
        return plain(result, seen)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__"):
        setattr(guarded, attribute, getattr(func, attribute))
    guarded.__dict__ = func.__dict__  # the marks decorators leave on it (jinja's pass_context, pluggy's hookimpl)
    _wrapped[guarded] = func
    return guarded


def _guard_member(value):
    if type(value) is _FunctionType:
        return _guard(value)
    if type(value) in (staticmethod, classmethod) and type(value.__func__) is _FunctionType:
        return type(value)(_guard(value.__func__))
    if type(value) is property and type(value.fget) is _FunctionType:
        return property(_guard(value.fget), value.fset, value.fdel, value.__doc__)
    return None


def _own_code(value) -> bool:
    """A function (or staticmethod, classmethod, property over one) written in the code under test."""
    func = _function_of(value)
    # not "<string>": code a library made at run time (a dataclass's __eq__), which abspath would put in the cwd
    return func is not None and _inside(func.__code__.co_filename) and not func.__code__.co_filename.startswith("<")


def _guard_class(cls) -> None:
    if cls in _guarded_classes or not any(_own_code(value) for value in _type_dict(cls).values()):
        return  # a class a repository module only imported (urllib3's PoolManager): the library's, left as it is
    _guarded_classes.add(cls)
    for name, value in list(_type_dict(cls).items()):
        if name not in _UNWRAPPED and _own_code(value):
            guarded = _guard_member(value)
            if guarded is not None:
                _type_setattr(cls, name, guarded)


def guard_modules() -> None:
    """Wrap the code under test's functions and classes, and point the tests' names at the wrappers. Each sweep
    looks only at modules imported since the last one."""
    modules = []
    for name in sys.modules.keys() - _seen_modules:
        _seen_modules.add(name)
        module = sys.modules[name]
        # the repository's: loaded from a file inside it, or one that says so of itself (wrapped, never a test)
        path = _origin(module) if isinstance(module, _ModuleType) else None
        if _inside(path) or path is None and isinstance(module, _ModuleType) \
                and _inside(module.__dict__.get("__file__")):
            modules.append(module)
    swapped = {}
    for module in modules:
        if not _test_module(module):
            for key, value in list(module.__dict__.items()):
                if type(value) is _FunctionType and _inside(value.__code__.co_filename):
                    swapped[id(value)] = module.__dict__[key] = _guard(value)
                elif issubclass(type(value), type) and not _library_class(value):
                    _guard_class(value)
    for module in modules:
        if swapped and _test_module(module):
            for key, value in list(module.__dict__.items()):
                if id(value) in swapped and type(value) is _FunctionType:
                    module.__dict__[key] = swapped[id(value)]
