"""`ast.parse` made safe to call from several threads on Python 3.11 before 3.11.8 (imported by `composer/__init__`).

    python -c "import composer, ast; print(ast.parse is not composer.threadsafe_ast.UNGUARDED)"

CPython 3.11 up to 3.11.7 keeps the depth counter of its AST-to-object conversion in per-interpreter state, shared by
all threads (python/cpython#106905): when a garbage collection inside one thread's conversion runs Python code (a
`__del__`, a gc callback) and another thread converts meanwhile, the first fails with `SystemError: AST constructor
recursion depth mismatch`. Composer parses in threads (task generation, concurrent episodes' grading, zoo building),
and CI saw it (tasks.generate, 2026-12-05, Python 3.11.7). CPython fixed it with a counter per conversion in 3.11.8 and
3.12.2 (python/cpython#113476, #113472); 3.12.0 and 3.12.1 still share the counter (the test's interleaving did not
make them fail), so they are guarded too, and later releases are left as they are.

Conversions take one process-wide lock; parsing holds the GIL anyway, so threads lose no parallelism. The lock is
re-entrant because a collection inside a conversion may parse again in the same thread.
"""
import ast
import sys
import threading

UNGUARDED = ast.parse
_LOCK = threading.RLock()


def parse(*args, **kwargs):
    with _LOCK:
        return UNGUARDED(*args, **kwargs)


if sys.version_info < (3, 11, 8) or (3, 12) <= sys.version_info < (3, 12, 2):
    parse.__doc__ = UNGUARDED.__doc__
    ast.parse = parse  # ast.literal_eval, inspect and pytest's rewriter all call it through the module
