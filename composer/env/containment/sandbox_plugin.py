"""The outcome plugin every sandboxed pytest run loads with `-p` (composer.env.containment.sandbox writes this file's
text into the run's read-only plugin folder as `_composer_sandbox_plugin_<suffix>.py`, the suffix its session's own; it
imports nothing of composer).

Each test report's node id, phase and outcome (and a call's recorded properties: grading's probes) go down a pipe,
each line carrying the run's token, and an end line closes the session. The pipe's number and the token are taken out of the environment when pytest loads the
plugin, before any conftest or test module is imported. In a grading run (COMPOSER_SANDBOX_PLAIN set) it also
makes the values the tests compare plain (composer/env/containment/plain_values.py, written beside it).
"""

import importlib
import json
import os

_FD = int(os.environ.pop("COMPOSER_SANDBOX_REPORT_FD"))
_TOKEN = os.environ.pop("COMPOSER_SANDBOX_TOKEN")
_WANTED = os.environ.pop("COMPOSER_SANDBOX_SELECT", None)
_PLAIN = os.environ.pop("COMPOSER_SANDBOX_PLAIN", None)  # the plain-values module's name in this session
_PLAIN = importlib.import_module(_PLAIN) if _PLAIN else None


def _send(row):
    os.write(_FD, (json.dumps([_TOKEN, *row]) + "\n").encode())


def pytest_collection_modifyitems(config, items):
    if _WANTED:
        wanted = set(json.loads(_WANTED))
        keep = [i for i in items if i.nodeid in wanted or i.nodeid.split("::")[0] in wanted]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if _PLAIN:
        _PLAIN.guard_modules()


def pytest_runtest_setup(item):
    if _PLAIN:
        _PLAIN.guard_modules()  # modules first imported by a fixture or an earlier test


def pytest_runtest_logreport(report):
    row = [report.nodeid, report.when, report.outcome, hasattr(report, "wasxfail")]
    if report.when == "call" and report.user_properties:  # record_property: a grading probe's value
        try:
            json.dumps(dict(report.user_properties))
            row.append(dict(report.user_properties))
        except (TypeError, ValueError):
            pass
    _send(row)


def pytest_sessionfinish(session, exitstatus):
    _send(["@end", "", int(exitstatus), False])
