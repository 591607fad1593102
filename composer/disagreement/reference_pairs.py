"""Pairs that do not come from teachers: the expert's own next actions (the positive control B+) and oracle pairs from
a task's known fix, and the embedded traces spike 003 uses when 002a's file is not there yet.

    from composer.disagreement import reference_pairs
    reference_pairs.expert_pairs(train_tasks, student, count=200)   # the expert's action over the student's
    reference_pairs.oracle_pairs(train_tasks)                       # chosen: the gold edit (a pipeline check)
    reference_pairs.embedded_traces(4)                              # the scripted expert with human-like detours
"""

import json
import os
import random

from composer.actions import canonical_tool_call
from composer.disagreement.pairs import pair_id, render_action
from composer.traces import prompt_messages


def embedded_traces(n_traces: int = 2, *, seed: int = 0, explore: float = 0.5, wrong_edit: float = 0.5,
                    skip_rerun: float = 0.5, n_functions: int = 1, cache: bool = True) -> list:
    """A tiny embedded trace set made on the fly: the scripted expert with human-like detours (the noisy
    demonstrations the zoo student is trained on, so a stand-in for the student's own behaviour) on
    generated train-split tasks with held-out probes, as StepRecords (source "composer-embedded", outcome and final
    reward from the environment). Not 002a's traces: the report says which it used. With cache, kept as JSONL under
    models.cache_root()/pairs/, keyed by the arguments and the task generator's version."""
    from composer import policies
    from composer.env.defences import probes
    from composer.env.embedded import tasks
    from composer.env.environment import CodingEnv
    from composer.files import config_hash
    from composer.models import cache_root
    from composer.traces import (
        SCHEMA_VERSION,
        Action,
        State,
        StepRecord,
        ToolCall,
        TraceWriter,
        import_jsonl,
    )

    key = config_hash(n=n_traces, seed=seed, noise=(explore, wrong_edit, skip_rerun), n_functions=n_functions,
                generator=tasks.GENERATOR_VERSION, env=policies.ENV_CONFIG, tasks="with probes")
    cached = cache_root() / "pairs" / f"embedded-traces-{key}.jsonl"
    if cache and cached.is_file():
        return import_jsonl(cached)

    records, _ = probes.rewarded(n_traces, seed=seed, split="train",
                                 difficulty=tasks.Difficulty(n_functions=n_functions))
    env = CodingEnv(records, policies.ENV_CONFIG)
    out = []
    try:
        for i, instance in enumerate(records):
            noise = policies.Noise(explore=explore, wrong_edit=wrong_edit, skip_rerun=skip_rerun)
            messages, reward, info = policies.demonstrate(env, instance, noise=noise, seed=seed * 1000 + i)
            turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
            trace_id = f"{instance['instance_id']}#expert{seed}-{i}"
            for t, j in enumerate(turns):
                call = messages[j]["tool_calls"][0]
                name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
                last = t == len(turns) - 1
                answer = messages[j + 1] if j + 1 < len(messages) else None
                out.append(StepRecord(
                    schema_version=SCHEMA_VERSION, trace_id=trace_id, step=t,
                    state=State(messages=messages[:j]),
                    action=Action(text=render_action(canonical_tool_call(name, arguments), (name, arguments)),
                                  tool_call=ToolCall(name=name, arguments=arguments, id=call["id"])),
                    observation=answer["content"] if answer else None, reward=reward if last else None,
                    done=last, truncated=False, source="composer-embedded", task_id=instance["instance_id"],
                    outcome={"resolved": reward == 1.0, "reward": reward} if last else None,
                    meta={"policy": "scripted expert with noise", "noise": [explore, wrong_edit, skip_rerun]}))
    finally:
        env.close()
    if cache:
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        with TraceWriter(tmp, resume=False) as w:
            for r in out:
                w.write(r)
        os.replace(tmp, cached)  # atomic: a concurrent reader sees the whole file or none
    return out


def expert_pairs(instances: list[dict], student, *, count: int, max_new_tokens: int = 160) -> list[dict]:
    """004's positive control: `count` pairs known to be informative (B's count; planted, at least one per test
    task: composer.ab.preparation). Along the scripted expert's shortest demonstration of each task, at every state
    where the student's greedy next action differs from the expert's: chosen = the expert's action, rejected = the
    student's (its text as generated when it is no well-formed call); on a task where it differs nowhere, one pair at
    the expert's edit, rejected = that edit with a slip (as oracle_pairs), so that what the others' pairs teach does
    not pull it off a task it solves (planted without them, B+ lost 0.20 of pass@1 on the 9 of 40 test tasks the
    student already solved, and gained 0.17 on the others). Rule "expert", margin 1.0. Spread over the
    tasks: each task's first such state, in task order, then each one's second, ..., so that `count` pairs reach as
    many tasks as they can (in order, 16 pairs planted on the test tasks covered 13 of 40, and B+'s gain stayed on
    those: +0.28 there, 0 on the others, an interval through 0 over all 40); fewer than `count` when the tasks run
    out (the caller says so)."""
    from composer import policies
    from composer.env.environment import CodingEnv
    from composer.models import load_model, load_tokenizer

    model, tokenizer = load_model(student), load_tokenizer(student)
    model.eval()
    env = CodingEnv(instances, policies.ENV_CONFIG)

    def states(instance):  # the task's pairs, one at a time, generated only as they are asked for
        messages, _, _ = policies.demonstrate(env, instance)
        differs = False
        for at in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
            prompt = prompt_messages(messages[:at])
            call = messages[at]["tool_calls"][0]["function"]
            expert = (call["name"], json.loads(call["arguments"]) if isinstance(call["arguments"], str)
                      else call["arguments"])
            text = policies.next_turn(model, tokenizer, messages[:at], max_new_tokens=max_new_tokens)
            parsed = policies.parse_tool_call(text)
            chosen_action = canonical_tool_call(*expert)
            rejected_action = canonical_tool_call(*parsed) if parsed else text
            if rejected_action != chosen_action:
                differs = True
                yield {"pair_id": pair_id(prompt, chosen_action, rejected_action),
                       "trace_id": f"{instance['instance_id']}#expert", "step": at // 2 - 1,
                       "task_id": instance["instance_id"], "rule": "expert", "control": None, "prompt": prompt,
                       "chosen": render_action(chosen_action, expert),
                       "rejected": render_action(rejected_action, parsed) if parsed else text,
                       "chosen_action": chosen_action, "rejected_action": rejected_action,
                       "student_action": rejected_action, "margin": 1.0}
        if not differs and (anchor := _slip_pair(env, instance, random.Random(instance["instance_id"]), "expert",
                                                 messages)):
            # a task the student already solves as the expert does: kept so, not left to drift
            yield {**anchor, "student_action": anchor["chosen_action"]}

    out, live = [], []
    try:
        for instance in instances:  # the first round: each task's first pair, in order
            if len(out) == count:
                break
            task = states(instance)
            if (pair := next(task, None)) is not None:
                out.append(pair)
                live.append(task)
        while live and len(out) < count:  # then each task with pairs left gives its next one, in turn
            for task in list(live):
                if len(out) == count:
                    break
                if (pair := next(task, None)) is None:
                    live.remove(task)
                else:
                    out.append(pair)
    finally:
        env.close()
    return out


def oracle_pairs(instances: list[dict], *, seed: int = 0) -> list[dict]:
    """Pairs whose preference is known, standing in for 003's when its output is not there (004's smoke
    default): at the state where the scripted expert edits (after run_tests and view), chosen = its gold edit,
    rejected = the same edit with one slip (a wrong fix of the bug, as in the noisy demonstrations). One pair
    per task that has a slip to make; rule "oracle", margin 1.0, no teacher votes."""
    from composer import policies
    from composer.env.environment import CodingEnv

    rng = random.Random(seed)
    env = CodingEnv(instances, policies.ENV_CONFIG)
    try:
        return [pair for instance in instances if (pair := _slip_pair(env, instance, rng, "oracle")) is not None]
    finally:
        env.close()


def _slip_pair(env, instance: dict, rng: random.Random, rule: str, demonstration: list | None = None) -> dict | None:
    """At the state where the scripted expert edits (after run_tests and view): chosen = its gold edit, rejected =
    the same edit with one slip; None where there is no slip to make. `demonstration`: the expert's messages on
    this task where the caller has them (made here otherwise)."""
    from composer import policies
    from composer.env.environment import gold_edits

    path = gold_edits(instance)[0]["path"]
    env.reset(instance=instance)
    source = (env.repo / path).read_text()
    fix = policies.gold_fix(instance, source)
    buggy = "".join(source.splitlines(keepends=True)[fix["start"] - 1:fix["end"]])
    wrong = policies._slip(fix["new_text"], buggy, rng)
    if wrong is None:
        return None
    messages = demonstration or policies.demonstrate(env, instance)[0]
    at = next(i for i, m in enumerate(messages)
              if m["role"] == "assistant" and m["tool_calls"][0]["function"]["name"] == "edit")
    prompt = prompt_messages(messages[:at])
    calls = [{"path": path, "new_text": text, "start": fix["start"], "end": fix["end"]}  # the expert's order
             for text in (fix["new_text"], wrong)]
    actions = [canonical_tool_call("edit", args) for args in calls]
    chosen, rejected = (render_action(a, ("edit", args)) for a, args in zip(actions, calls))
    return {"pair_id": pair_id(prompt, *actions), "trace_id": f"{instance['instance_id']}#{rule}",
            "task_id": instance["instance_id"], "rule": rule, "control": None, "prompt": prompt, "chosen": chosen,
            "rejected": rejected, "chosen_action": actions[0], "rejected_action": actions[1], "margin": 1.0,
            "step": at // 2 - 1}
