"""composer.costs.power and `composer plan --budget-usd`: what a live A/B design can detect and what it costs, by hand
and by simulation, and the search over designs and treatments."""

import collections
import dataclasses
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.optimize
import yaml
from scipy.special import expit, logit

from composer import stats
from composer.ab import analysis
from composer.costs import compute, plan, power
from composer.env.real import container, swebench
from composer.paths import ROOT

LIVE = yaml.safe_load((ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml").read_text())


def test_mde_by_hand():
    """The mde is the effect d at which a design with the variance AT d has 80 % power: the plain formula's fixed
    point, with the components stated at the base rate p (discordance 2 p (1 - p); the task and seed SDs on the logit
    scale, times the slope p (1 - p)) and grown to d as 004's analysis grows its own (power.components_at): the
    residual by B's binomial variance at p + d, the task and seed terms by its square."""
    a = power.Assumptions(discordance=0.2, task_sd_logit=0.5, seed_sd_logit=0.1)
    seeds, tasks, samples = 3, 50, 2
    p = a.rate
    assert 2 * p * (1 - p) == pytest.approx(0.2)
    w = lambda q: q * (1 - q)  # noqa: E731

    def plain(d):  # stats.t_detectable_effect at the design's expected mean squares at effect d
        residual = (w(p) + w(p + d)) / samples
        grow = (w(p) ** 2 + w(p + d) ** 2) / (2 * w(p) ** 2)
        seed, task = (0.1 * w(p)) ** 2 * grow, (0.5 * w(p)) ** 2 * grow
        seed_ms, task_ms = residual + tasks * seed, residual + seeds * task
        se = math.sqrt((seed_ms + task_ms) / (seeds * tasks))
        df = (seed_ms + task_ms) ** 2 / (seed_ms ** 2 / 2 + task_ms ** 2 / 49)
        return stats.t_detectable_effect(se, df)

    got = power.mde(seeds, tasks, samples, a)
    assert got == pytest.approx(plain(got), abs=1e-5) and got > plain(0.0)  # the variance with no effect says less
    assert power.components(seeds, tasks, samples, a, effect=0.1)["residual"] == pytest.approx((w(p) + w(p + 0.1)) / 2)
    # more of anything never hurts; the task term is a floor that seeds and samples cannot cross
    assert power.mde(6, tasks, samples, a) < power.mde(3, tasks, samples, a)
    assert power.mde(3, tasks, 8, a) < power.mde(3, tasks, 2, a)
    assert power.floor(tasks, a) < power.mde(1000, tasks, 1000, a) < power.floor(tasks, a) * 1.05
    with pytest.raises(ValueError, match="2 seeds"):
        power.mde(1, 50, 1)


def test_the_planned_mde_is_what_004s_analysis_detects_80_percent_of_the_time():
    """Cells drawn from the planning model at a true B - A of d: A's samples at the base rate p, B's at p + d plus a
    seed and a task term as power.components gives them at d, analysed by analysis.difference as 004 does. At d =
    power.mde the interval is above 0 in 78-88 % of 1,000 experiments (80 % nominal; Monte Carlo SE 1.3 points); at
    the mde the variance with no effect gives (stats.t_detectable_effect at power.components' effect 0) it is under
    77 %: that mde promised too much."""
    a = power.Assumptions(discordance=0.22, task_sd_logit=0.45, seed_sd_logit=0.18)
    seeds, tasks, samples, n = 4, 60, 1, 1000
    rng = np.random.default_rng(0)
    p = a.rate

    def detected(d):
        c = power.components(seeds, tasks, samples, a, effect=d)
        b = (p + d + rng.normal(0, math.sqrt(c["seed"]), (n, seeds, 1, 1))
             + rng.normal(0, math.sqrt(c["task"]), (n, 1, tasks, 1)))
        draw = lambda q: (rng.random((n, seeds, tasks, samples)) < np.clip(q, 0, 1)).mean(axis=3)  # noqa: E731
        return np.mean([analysis.difference(x, y)["diff"].low > 0 for x, y in zip(draw(p), draw(b))])

    honest = power.mde(seeds, tasks, samples, a)
    se, df = stats.crossed_standard_error(power.components(seeds, tasks, samples, a))
    at_zero = stats.t_detectable_effect(se, df)
    assert at_zero < honest
    assert 0.78 <= detected(honest) <= 0.88
    assert detected(at_zero) < 0.77


def test_cost_by_hand():
    t, setup = power.treatment(LIVE), compute.Setup("full", "server", 0, 8, dpo_pairs=1)
    got = power.cost(t, setup, seeds=3, tasks=100, samples=2, assumptions=power.Assumptions(usd_per_h100_hour=2.0))
    w, model = compute.workload(LIVE), compute.MODELS["Qwen/Qwen3-8B"]
    run = lambda s: compute.gpu_hours(model, s, steps=100, rollouts_per_step=112,  # noqa: E731
                                      tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"])["gpu_hours"]
    train = 3 * (run(compute.Setup("full", "server", 0, 8)) + 3 * run(setup))  # A without the channel, 3 arms with
    evaluate = (4 * 3 + 1) * compute.evaluation_gpu_hours(model, setup, episodes=200,
                                                          tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"])
    assert got == pytest.approx({"train_gpu_hours": train, "eval_gpu_hours": evaluate, "gpu_hours": train + evaluate,
                                 "usd": 2.0 * (train + evaluate)})
    two = power.cost(t, setup, seeds=3, tasks=100, samples=2, arms=("A", "B"))
    assert two["train_gpu_hours"] == pytest.approx(3 * (run(compute.Setup("full", "server", 0, 8)) + run(setup)))
    # nested doses: each training evaluated at 2 checkpoints more, for the price of those evaluations alone
    nested = power.cost(t, setup, seeds=3, tasks=100, samples=2, checkpoints=2,
                        assumptions=power.Assumptions(usd_per_h100_hour=2.0))
    assert nested["train_gpu_hours"] == pytest.approx(train)
    assert nested["eval_gpu_hours"] == pytest.approx(evaluate / (4 * 3 + 1) * (4 * 3 * 3 + 1))


def test_the_live_profiles_nested_doses_are_priced_as_evaluations_and_said():
    """The profile's checkpoints reach its design, its wall time and its one-line description; without them the
    design trains as much and evaluates 4 x 3 checkpoints fewer per dose."""
    nested, plain = power.design(LIVE), power.design({**LIVE, "checkpoints": []})
    k = len(LIVE["checkpoints"])
    assert k > 0 and nested["checkpoints"] == k and plain["checkpoints"] == 0
    assert nested["train_gpu_hours"] == plain["train_gpu_hours"] and nested["mde"] == plain["mde"]
    assert nested["eval_gpu_hours"] == pytest.approx(plain["eval_gpu_hours"] * (12 * (1 + k) + 1) / 13)
    assert f"each training also evaluated at {k} checkpoints (nested doses)" in power.describe(nested)
    assert "nested" not in power.describe(plain)
    assert power.wall_hours(LIVE, 1) > power.wall_hours({**LIVE, "checkpoints": []}, 1)


def test_wall_time_on_n_nodes_by_hand():
    """12 trainings (4 arms x 3 seeds) of one training run's hours each (on average), then 13 evaluations, in waves
    of N (the profile without nested doses)."""
    live = {**LIVE, "checkpoints": []}
    d = power.design(live)
    one, evaluation = d["train_gpu_hours"] / 12 / d["gpus"], d["eval_gpu_hours"] / 13 / d["gpus"]
    assert power.wall_hours(live, 1) == pytest.approx(12 * one + 13 * evaluation)
    assert power.wall_hours(live, 5) == pytest.approx(3 * one + 3 * evaluation)
    assert power.wall_hours(live, 13) == pytest.approx(one + evaluation)


def test_the_live_design_and_the_search():
    own = power.design(LIVE)
    assert (own["seeds"], own["samples"], own["pool"]) == (3, 4, "lite:test:pytest")
    assert own["tasks"] == power.named_pools()["lite:test:pytest"][0]
    assert (own["student"], own["mode"], own["steps"], own["rollouts_per_step"]) == ("Qwen/Qwen3-8B", "full", 100, 112)
    assert (own["vllm"], own["gpus"], own["arms"]) == ("colocate", 2, ["A", "B", "control", "B+"])
    assert own["mde"] > 0.02  # 3 x 33 x 4 cannot see 2 points
    # the live student's published base rate (3.6 %) is below the floor: the search refuses it, and says why
    refused = power.search(own["usd"], LIVE, effect=0.05)
    assert refused["best_same_treatment"] is None and refused["cheapest_same_treatment"] is None
    assert refused["refused"]["Qwen/Qwen3-8B"].startswith("Qwen3-8B: base rate 3.6% < the 5% floor")
    assert refused["best"]["student"] == "Qwen/Qwen3-14B"  # the one student above the floor that fits a layout
    # given a base rate above it (a pilot's, say), the live treatment is searched as the others are
    found = power.search(own["usd"], LIVE, effect=0.05, base_rates={"Qwen/Qwen3-8B": (0.2, "a pilot")})
    assert found["live"] == power.design(LIVE, base_rate=0.2)  # the live design's mde at the student's rate
    same = found["best_same_treatment"]
    assert same["usd"] <= own["usd"] and same["mde"] <= own["mde"]  # the profile's design is in the grid
    assert (same["student"], same["steps"], same["rollouts_per_step"]) == ("Qwen/Qwen3-8B", 100, 112)
    # with every treatment searched, the same money detects less: a cheaper treatment buys seeds and tasks
    assert found["best"]["mde"] <= same["mde"] and found["best"]["usd"] <= own["usd"]
    assert found["cheapest"]["usd"] <= found["cheapest_same_treatment"]["usd"]
    for key in ("cheapest_for_effect", "cheapest_for_effect_same_treatment"):
        assert found[key]["mde"] <= 0.05
    assert found["cheapest_for_effect"]["usd"] <= found["cheapest_for_effect_same_treatment"]["usd"]
    # a budget under the cheapest design buys nothing, and says what the cheapest costs
    poor = power.search(found["cheapest"]["usd"] * 0.99, LIVE, base_rates={"Qwen/Qwen3-8B": (0.2, "a pilot")})
    assert poor["best"] is None and poor["cheapest"] == found["cheapest"]
    # 2 points needs more than Lite's pytest tasks: at a 20 % base rate their 93 tasks' task term alone is over 0.02
    at = power.at_base_rate(power.Assumptions(), 0.2)
    assert power.floor(93, at) > 0.02 and power.floor(33, at) > power.floor(93, at)
    lite = power.search(math.inf, LIVE, effect=0.02, pools={k: power.named_pools()[k]
                                                            for k in ("lite:pytest", "lite:test:pytest")},
                        base_rates={"Qwen/Qwen3-8B": (0.2, "a pilot")})
    assert lite["cheapest_for_effect"] is None


def test_the_plan_prices_only_tasks_004_would_grade():
    """Every pool counts the tasks whose tests pytest runs: on the others grading has the scan alone, and 004 (and
    reset, and swebench.evaluate) refuses them, so a plan over them would recommend a run that cannot start."""
    pools = power.named_pools()
    assert set(pools) == {"lite:test:pytest", "lite:pytest", "verified:pytest", "swe-bench:test:pytest"}
    # counted from the shipped indexes with the refusal's own rule: every row kept is one grading accepts
    for name, index in (("lite:pytest", "lite"), ("verified:pytest", "verified")):
        rows = swebench.index(index)
        kept = [r for r in rows if container.scan_only_refusal(r) is None]
        assert pools[name][0] == len(kept) < len(rows), name
    assert {r["repo"] for r in swebench.index("lite") if container.scan_only(r)} == {
        "django/django", "sympy/sympy", "sphinx-doc/sphinx"}
    test = swebench.LITE_SOURCES["lite:test:pytest"]()
    assert pools["lite:test:pytest"][0] == len(test) == 33 and set(test) < set(swebench.lite_split("test"))
    # the full split has no shipped index: its count by repository, checked where an index exists (Verified's 500
    # count the same way), and every version of a repository runs the same test runner
    assert sum(swebench.TEST_SPLIT_REPOSITORIES.values()) == 2294
    verified = collections.Counter(r["repo"] for r in swebench.index("verified"))
    assert set(verified) == set(swebench.TEST_SPLIT_REPOSITORIES)
    assert pools["swe-bench:test:pytest"][0] == sum(
        n for repo, n in swebench.TEST_SPLIT_REPOSITORIES.items() if repo not in verified or not any(
            container.scan_only(r) for r in swebench.index("verified") if r["repo"] == repo))
    # the live profile plans on what it runs
    assert power.design(LIVE)["pool"] in pools and LIVE["train_tasks"] == "lite:train:pytest"


def test_the_search_varies_the_treatment_and_keeps_to_fitting_layouts():
    given = {"Qwen/Qwen3-1.7B": (0.1, "given"), "Qwen/Qwen3-8B": (0.1, "given")}
    found = power.search(math.inf, LIVE, students=("Qwen/Qwen3-1.7B",), base_rates=given)
    best = found["best"]
    assert best["student"] == "Qwen/Qwen3-1.7B" and best["seeds"] == max(power.SEEDS)
    assert found["best_same_treatment"]["student"] == "Qwen/Qwen3-8B"  # the live treatment is always searched
    for t in (power.Treatment("Qwen/Qwen3-8B", "full", 25, 28, 15, 16384),
              power.Treatment("Qwen/Qwen3-0.6B", "lora", 25, 28, 15, 16384)):
        for setup in power.layouts(t):
            assert compute.memory_gb(compute.MODELS[t.student], setup, seq_tokens=t.max_tokens)["fits"]
            assert t.rollouts_per_step % setup.training_gpus == 0
    # every candidate left out fails its memory check or cannot split the rollouts: none that fits is dropped
    t = power.Treatment("Qwen/Qwen3-8B", "full", 25, 28, 15, 16384)
    model, kept = compute.MODELS[t.student], power.layouts(t)
    for setup in set(power.candidate_layouts("full")) - set(kept):
        assert not compute.memory_gb(model, setup, seq_tokens=t.max_tokens)["fits"] or 28 % setup.training_gpus
    # an 8B full fine-tune's 16 bytes a parameter fit fewer than 8 H100s only offloaded, and H200s hold it on 2
    assert {s.gpus for s in kept if s.gpu == "H100" and not s.offload} == {8}
    assert min(s.gpus for s in kept if s.gpu == "H200" and not s.offload) == 2
    assert power.layouts(power.Treatment("Qwen/Qwen3-0.6B", "lora", 25, 28, 15, 16384))[0].gpus == 1
    # the chosen layout is the cheapest in dollars of A's and B's trainings, each GPU at its own price
    a = power.Assumptions(usd_per_h200_hour=1.0)
    price = {s: (power.runs(t, s)["A"] + power.runs(t, s)["B"]) * a.usd_per_hour(s.gpu) for s in kept}
    assert price[power.layout(t, a)] == min(price.values()) and power.layout(t, a).gpu == "H200"
    assert power.layout(t, power.Assumptions(usd_per_h200_hour=100.0)).gpu == "H100"
    # fewer steps are cheaper, and the same steps with the environment concurrent too
    t = power.Treatment("Qwen/Qwen3-8B", "full", 100, 112, 30, 32768)
    setup = power.layout(t)
    assert power.runs(t, setup)["B"] < power.runs(t, setup, False)["B"]  # the code's concurrent default
    assert power.runs(power.Treatment("Qwen/Qwen3-8B", "full", 25, 112, 30, 32768), setup)["B"] == pytest.approx(
        power.runs(t, setup)["B"] / 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"budget_usd": -5}, "budget_usd must be > 0, got -5"),
    ({"budget_usd": 100, "effect": 0}, "effect must be > 0"),
    ({"budget_usd": 100, "students": ("Qwen/Qwen3-70B",)}, "unknown student 'Qwen/Qwen3-70B'"),
])
def test_bad_searches_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        power.search(values=LIVE, **kwargs)


def test_plan_budget_cli_prints_the_designs_and_json_last(capsys):
    assert plan.main(["--budget-usd", "5000", "--effect", "0.05", "--task-sd-logit", "0.5"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["budget_usd"] == [5000] and result["assumptions"]["task_sd_logit"] == 0.5
    [r] = result["results"]
    assert r == {k: v for k, v in power.search(5000, LIVE, power.Assumptions(task_sd_logit=0.5), effect=0.05).items()
                 if k != "live"}
    assert f"the live profile's design: {power.describe(result['live_design'])}" in out
    assert f"best within $5,000: {power.describe(r['best'])}; a different experiment from the live profile's" in out
    assert ("best within $5,000 with the live profile's treatment: refused: Qwen3-8B: base rate 3.6% < the 5% floor"
            in out)
    assert f"to detect 0.05: {power.describe(r['cheapest_for_effect'])}" in out
    assert "the environment concurrent (composer.episodes, the code's default)" in out and result["concurrent_tools"]
    assert plan.main(["--budget-usd", "10"]) == 0  # under the cheapest design: one line that says why
    assert re.search(r"best within \$10: nothing: the cheapest design costs \$\d", capsys.readouterr().out)
    assert plan.main(["--budget-usd", "5000", "--serial-tools", "--student", "Qwen/Qwen3-4B",
                      "--base-rate", "Qwen/Qwen3-4B=0.1"]) == 0
    out = capsys.readouterr().out
    serial = json.loads(out.strip().splitlines()[-1])
    assert "serial per process (--serial-tools" in out and "best within $5,000: Qwen/Qwen3-4B" in out
    assert serial["concurrent_tools"] is False
    assert serial["results"][0]["best"] == power.search(5000, LIVE, effect=None, students=("Qwen/Qwen3-4B",),
                                                         concurrent_tools=False,
                                                         base_rates={"Qwen/Qwen3-4B": (0.1, "given")})["best"]


@pytest.mark.parametrize("args, message", [
    (["--budget-usd", "-5"], "--budget-usd must be > 0, got -5: dollars (e.g. --budget-usd 5000)"),
    (["--budget-usd", "100", "--effect", "-0.1"], "--effect must be > 0, got -0.1"),
    (["--budget-usd", "100", "--student", "Qwen/Qwen3-70B"],
     "--student: unknown student 'Qwen/Qwen3-70B': composer/costs/compute.py's MODELS has"),
    (["--budget-usd", "100", "--base-rate", "Qwen/Qwen3-4B=1.5"], "--base-rate Qwen/Qwen3-4B=1.5: a pass@1 is between"),
    (["--budget-usd", "100", "--base-rate", "Qwen/Qwen3-4B"], "--base-rate Qwen/Qwen3-4B: could not convert"),
    (["--budget-usd", "100", "--pool-file", "no/such/tasks.jsonl"],
     "--pool-file no/such/tasks.jsonl: no/such/tasks.jsonl: no such file"),
])
def test_bad_budget_input_is_refused_naming_it_and_the_fix(args, message, capsys):
    assert plan.main(args) == 2
    assert message in capsys.readouterr().err


def test_a_pool_file_is_the_test_pool(tmp_path, capsys):
    record = json.loads((ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json").read_text())
    record = record[0] if isinstance(record, list) else record
    pool = tmp_path / "tasks.jsonl"
    pool.write_text("".join(json.dumps({**record, "instance_id": f"{record['instance_id']}-{i}"}) + "\n"
                            for i in range(40)))
    assert plan.main(["--budget-usd", "2000", "--pool-file", str(pool)]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"][0]
    assert r["best"]["pool"] == str(pool) and r["best"]["tasks"] == 40
    pool.write_text(json.dumps(record) + "\n")
    assert plan.main(["--budget-usd", "2000", "--pool-file", str(pool)]) == 2
    assert "1 record(s): a design needs at least 2 test tasks" in capsys.readouterr().err
    # a file with a task 004 would refuse (its tests run under django's runner: graded by the scan alone) is refused
    # too, naming it: the plan never prices a run that cannot start
    django = {**record, "instance_id": "django__django-11099", "repo": "django/django", "version": "3.0"}
    pool.write_text(json.dumps(record) + "\n" + json.dumps(django) + "\n")
    assert plan.main(["--budget-usd", "2000", "--pool-file", str(pool)]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 records in" in err and "refusing to grade django__django-11099" in err


def test_the_readme_budget_table_is_the_commands_output():
    """README's "what each budget buys" rows are `python -m composer plan --budget-usd 200 1000 5000 25000`'s."""
    done = subprocess.run([sys.executable, "-m", "composer", "plan", "--budget-usd", "200", "1000", "5000", "25000"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("|")]
    assert len(rows) == 6
    readme = (ROOT / "README.md").read_text()
    assert "\n".join(rows) in readme, "README.md: paste the table of plan --budget-usd 200 1000 5000 25000"


def test_the_search_plans_only_what_runs_for_students_that_can_move():
    """No LoRA design (004's arms fine-tune fully); a student with no known base rate, or one below the floor, is
    refused with the reason; a design's mde is at its student's base rate (discordance 2 p (1 - p))."""
    found = power.search(5000, LIVE, students=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B"))
    assert set(found["refused"]) == {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"}
    assert "no base rate known; measure it first (python -m composer pilot" in found["refused"]["Qwen/Qwen3-0.6B"]
    for key in ("best", "cheapest"):
        d = found[key]
        assert d["mode"] == "full" and d["student"] == "Qwen/Qwen3-14B"
        assert d["mde"] == power.mde(d["seeds"], d["tasks"], d["samples"],
                                     power.at_base_rate(power.Assumptions(), 0.18))
    assert power.at_base_rate(power.Assumptions(), 0.18).discordance == pytest.approx(2 * 0.18 * 0.82)
    assert found["base_rates"]["Qwen/Qwen3-14B"]["pass_at_1"] == 0.18 and power.named_pools()["verified:pytest"][0] == 150
    # nobody above the floor: no design, and the table says so
    none = power.search(5000, LIVE, students=("Qwen/Qwen3-0.6B",))
    assert none["best"] is None and none["cheapest"] is None


def test_the_budget_table_says_when_the_grid_binds(capsys):
    assert plan.main(["--budget-usd", "200", "25000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| $")]
    assert "more money buys nothing here" not in rows[0] and "more money buys nothing here" in rows[1]
    assert plan.main(["--budget-usd", "200", "300", "--student", "Qwen/Qwen3-0.6B"]) == 0
    assert "no student above the floor fits" in capsys.readouterr().out


def _plan_terms(rng, shape, a: power.Assumptions, shift):
    """Each arm's logit at the plan's model: logit p (p = a.rate) + the arm's shift + its own halves of the seed and
    task x arm terms (SD seed_sd_logit / sqrt 2 per seed, task_sd_logit / sqrt 2 per task), so that B - A's task
    term is task_sd_logit times the slope p (1 - p) at no effect and grows with each arm's squared slope, as
    power.components_at takes it."""
    seeds, tasks = shape
    return expit(logit(a.rate) + shift + rng.normal(0, a.seed_sd_logit / math.sqrt(2), (seeds, 1))
                 + rng.normal(0, a.task_sd_logit / math.sqrt(2), (1, tasks)))


def _plan_cells(rng, seeds, tasks, samples, shift, a: power.Assumptions):
    """Cells (seeds x tasks, each the mean of `samples` 0/1 outcomes) of A and B under the plan's own model."""
    draw = lambda q: (rng.random((seeds, tasks, samples)) < q[..., None]).mean(axis=2)  # noqa: E731
    return draw(_plan_terms(rng, (seeds, tasks), a, 0.0)), draw(_plan_terms(rng, (seeds, tasks), a, shift))


def _plan_truth(shift, a: power.Assumptions, rng):
    """E[B - A] at a shift of B's logit (Monte Carlo over many seeds and tasks)."""
    return float(np.mean(_plan_terms(rng, (400, 4000), a, shift) - _plan_terms(rng, (400, 4000), a, 0.0)))


def _logistic_cells(rng, seeds, tasks, samples, shift, n_tasks_draw=None):
    """Cells from another model: logit pass@1 = task difficulty N(-1.6, 1.2) (pass@1 ~0.22, tasks far apart) + each
    arm's own seed effect (SD 0.15) + for B a task x arm interaction (SD 0.4) and the shift."""
    d = rng.normal(-1.6, 1.2, n_tasks_draw or tasks)[None, :]
    a = expit(d + rng.normal(0, 0.15, (seeds, 1)))
    b = expit(d + rng.normal(0, 0.15, (seeds, 1)) + rng.normal(0, 0.4, (1, d.shape[1])) + shift)
    if n_tasks_draw:  # the model's true components, by Monte Carlo over many seeds and tasks
        return a, b
    draw = lambda q: (rng.random((seeds, tasks, samples)) < q[..., None]).mean(axis=2)  # noqa: E731
    return draw(a), draw(b)


def _logistic_truth(shift, rng):
    """(E[B - A], the assumptions that are the model's true variance components at no effect: measured on pass@1 as
    a pilot would, put on the logit scale at the rate the discordance implies)."""
    a, b = _logistic_cells(rng, 400, 0, 1, shift, n_tasks_draw=4000)
    diff = b - a
    plan = power.Assumptions(discordance=float((a * (1 - a) + b * (1 - b)).mean()))
    slope = plan.rate * (1 - plan.rate)
    return float(diff.mean()), dataclasses.replace(plan, task_sd_logit=float(diff.mean(0).std()) / slope,
                                                   seed_sd_logit=float(diff.mean(1).std()) / slope)


class MeanMdeApart(AssertionError):
    """The mean mde 004 reports after the run is more than 1.2x from the plan's pre-run one (its power checked)."""


# At a 5 % base rate the mde 004 reports after the run is a convex function of its estimated components (the task
# and seed terms grow with the squared slope, ~4x from 5 % to the effect, and the mde with them), so its mean over
# experiments sits above the mde at the true components (Jensen): 1.32x and 1.30x the plan's here (medians 0.96x and
# 1.12x, q90 ~2x), while the plan's own mde holds its power (0.80, 0.86). The rule is one; 004's reading of it from 3-6
# seeds is conservative and noisy at low base rates. Strict: it fails once the mean comes within 1.2x.
_JENSEN = pytest.mark.xfail(strict=True, raises=MeanMdeApart, reason="at a 5 % base rate 004's post-hoc mde averages "
                            "1.3x the plan's (convex in its estimated components); power at the plan's holds")
REGIMES = [  # (model, seeds, tasks, samples, base rate, seed_sd_logit): designs an independent simulation found short
    *[(model, *design, 0.2, None) for model in ("plan", "logistic")
      for design in ((3, 103, 4), (6, 40, 1), (3, 40, 1), (5, 60, 2))],
    ("plan", 3, 40, 1, 0.2, 0.21), ("plan", 3, 103, 4, 0.2, 0.21),  # seeds that differ 3x more than assumed
    pytest.param("plan", 3, 103, 4, 0.05, None, marks=_JENSEN),  # a student at the floor's base rate
    pytest.param("plan", 6, 40, 1, 0.05, None, marks=_JENSEN),
]


@pytest.mark.parametrize("model, seeds, tasks, samples, rate, seed_sd", REGIMES)
def test_the_pre_run_mde_is_the_one_004_reports_and_holds_its_power(model, seeds, tasks, samples, rate, seed_sd):
    """Under two generative models (the plan's own at a base rate, and a logistic one whose components the plan is
    given, as a pilot would measure them), 600 experiments at the plan's pre-run mde detect it at least 78 % of the
    time, 600 with no effect read "above 0" at most 3 %, and the pre-run mde is within 1.2x of the mean mde 004's
    analysis reports after the run (analysis.difference)."""
    rng = np.random.default_rng(52)
    if model == "plan":
        a = power.at_base_rate(power.Assumptions(), rate)
        a = dataclasses.replace(a, seed_sd_logit=seed_sd) if seed_sd else a
        cells = lambda e: _plan_cells(rng, seeds, tasks, samples, e, a)  # noqa: E731
        truth = lambda e: _plan_truth(e, a, rng)  # noqa: E731
    else:
        _, a = _logistic_truth(0.0, rng)
        cells = lambda e: _logistic_cells(rng, seeds, tasks, samples, e)  # noqa: E731
        truth = lambda e: _logistic_truth(e, rng)[0]  # noqa: E731
    pre = power.mde(seeds, tasks, samples, a)
    zero = scipy.optimize.brentq(truth, -0.2, 3.0)  # the shift whose true B - A is 0 (clipping, convexity)
    null = [analysis.difference(*cells(zero)) for _ in range(600)]
    assert np.mean([r["diff"].low > 0 for r in null]) <= 0.03
    shift = scipy.optimize.brentq(lambda x: truth(x) - pre, -0.2, 3.0)
    assert np.mean([analysis.difference(*cells(shift))["diff"].low > 0 for _ in range(600)]) >= 0.78
    post = float(np.mean([r["mde"] for r in null]))
    if not 1 / 1.2 <= post / pre <= 1.2:
        raise MeanMdeApart((pre, post))


def test_the_plan_and_004_take_the_variance_at_the_effect_by_one_rule():
    """The plan's mde is 004's mde formula (stats.crossed_detectable_effect_at over power.components_at, as
    analysis.difference calls it) applied to the plan's stated components as if observed at the base rate: the same
    growth for the residual, the task and the seed terms."""
    for rate, (seeds, tasks, samples) in ((0.05, (6, 40, 1)), (0.2, (3, 103, 4)), (0.36, (5, 60, 2))):
        a = power.at_base_rate(power.Assumptions(), rate)
        c = power.components(seeds, tasks, samples, a)
        observed = {**c, "ms_seed": c["residual"] + tasks * c["seed"], "ms_task": c["residual"] + seeds * c["task"]}
        by_004 = stats.crossed_detectable_effect_at(lambda e: power.components_at(observed, e, rate, rate),
                                                    estimated=False)
        assert power.mde(seeds, tasks, samples, a) == pytest.approx(by_004, abs=1e-6)
        # and the growth is the squared slope's for the task term: ~4x from 5 % to 5 % + 0.1
        grown = power.components(seeds, tasks, samples, a, effect=0.1)["task"] / c["task"]
        w = lambda p: (p * (1 - p)) ** 2  # noqa: E731
        assert grown == pytest.approx((w(rate) + w(rate + 0.1)) / (2 * w(rate)))


def test_the_live_notebooks_pre_run_mde_is_the_headers():
    """004's live run prints the mde the plan gave before it ran: the header's, at the student's published base rate
    (not at the assumed discordance, which would promise a different design)."""
    d = power.design(LIVE, base_rate=power.BASE_RATES[LIVE["student"]][0])
    assert power.planned_mde(LIVE["student"], d["seeds"], d["tasks"], d["samples"]) == d["mde"]
    assert f"detects B - A >= {d['mde']:.3f} with 80 % power" in (ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml").read_text()
    assert power.planned_mde("someone/unknown", 3, 33, 4) == power.mde(3, 33, 4) != d["mde"]


def test_a_base_rate_of_0_or_1_gives_nothing_to_plan_from_and_is_refused():
    """At a rate of 0 or 1 two runs cannot differ: the power model refuses to state a variance there (rather than
    an mde of 0), and the search refuses a student near either end (the floor, and the ceiling above 1 - floor)."""
    for rate in (0.0, 1.0):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            power.mde(3, 40, 1, power.at_base_rate(power.Assumptions(), rate))
    with pytest.raises(ValueError, match=r"discordance must be in \(0, 0.5\]"):
        power.mde(3, 40, 1, power.Assumptions(discordance=0.6))
    assert "> the 95% ceiling" in power.refusal("Qwen/Qwen3-8B", {"Qwen/Qwen3-8B": (0.97, "a pilot")})
    assert power.refusal("Qwen/Qwen3-8B", {"Qwen/Qwen3-8B": (0.5, "a pilot")}) is None
    found = power.search(5000, LIVE, base_rates={"Qwen/Qwen3-8B": (1.0, "a pilot")}, students=("Qwen/Qwen3-8B",))
    assert found["best"] is None and "ceiling" in found["refused"]["Qwen/Qwen3-8B"]
    assert found["live"]["mde"] == power.design(LIVE)["mde"]  # at the assumptions: no variance at a rate of 1
