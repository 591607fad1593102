"""composer.env.defences.probes: held-out inputs whose expected values never enter the test process."""

import json
import random

from composer.env.containment import sandbox
from composer.env.defences import canaries, probes
from composer.env.embedded import tasks


def test_probes_move_one_argument_of_a_fail_to_pass_call_and_reveal_the_bug(tmp_path):
    """End to end on real tasks: planted in the graded file, every probe records the gold value on the gold repo,
    and no probe does on the buggy one (each was chosen where the bug shows)."""
    records = tasks.generate(6, seed=11, split="train") + tasks.generate(3, seed=11, split="test")
    with_probes = 0
    for record in records:
        held = probes.held_out(record)
        assert held == probes.held_out(record) and len(held) <= probes.PER_TASK  # fixed per task
        with_probes += bool(held)
        task = tasks._build(tasks._spec_of(record))
        f2p = json.loads(record["FAIL_TO_PASS"])
        visible = {task.cases[t][3] for t in task.cases}
        for probe in held:
            assert probe.expr not in visible and probe.file == f2p[0].split("::")[0]
            assert probe.expr.split("(")[0] in {task.cases[t][3].split("(")[0] for t in f2p}
        for kind, build in (("gold", tasks.gold_repo), ("buggy", tasks.materialize)):
            repo = build(record, tmp_path / f"{record['instance_id']}-{kind}")
            files = {f: (repo / f).read_text() for f in {t.split("::")[0] for t in f2p}}
            p = canaries.plant(files, f2p, json.loads(record["PASS_TO_PASS"]), random.Random(0), held)
            for f, text in p.files.items():
                (repo / f).write_text(text)
            run = sandbox.run_pytest(repo, p.test_ids, grading=True)
            missed = p.read(run.outcomes, missing=run.missing, properties=run.properties)[2]
            assert missed == ([] if kind == "gold" else list(p.probes)), (record["instance_id"], kind, run.output)
    assert with_probes >= 7  # most tasks' bugs show on a moved input


def test_a_probe_is_a_test_that_records_and_matching_is_strict():
    probe = probes.Probe("tests/test_ops.py", ("acct = Account(10)",), "acct.deposit(7)", 17)
    assert probes.source(probe, "test_x") == ("def test_x(record_property):\n    acct = Account(10)\n"
                                             "    record_property('value', repr(acct.deposit(7)))\n")
    assert probes.matches(probe, "17") and probes.matches(probe, "17.0")  # == as the task's tests compare
    for recorded in ("18", "'17'", "[17]", "Account()", "__import__('os')", None, 17, ""):
        assert not probes.matches(probe, recorded)


def test_real_records_get_no_probes():
    record = tasks.generate(1, seed=0)[0]
    assert probes.held_out({**record, "repo": "marshmallow-code/marshmallow"}) == []
