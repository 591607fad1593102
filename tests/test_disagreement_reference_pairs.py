"""composer.disagreement.reference_pairs: pairs that do not come from teachers (the expert's next action for 004's positive
control, oracle pairs from a task's fix) and the embedded traces.

    .venv/bin/pytest tests/test_disagreement_reference_pairs.py
"""

import json


from composer import traces
from composer.disagreement import pairs, reference_pairs
from composer.disagreement.reference_pairs import embedded_traces, expert_pairs


def test_embedded_traces():
    records = embedded_traces(1, seed=0)
    assert records and records[-1].done and records[-1].outcome["resolved"] in (True, False)
    assert all(r.action.tool_call is not None and r.source == "composer-embedded" for r in records)
    assert [r.step for r in records] == list(range(len(records)))
    assert records[1].state.messages[-1]["role"] == "tool"


def test_oracle_pairs_prefer_the_gold_edit_over_a_slip_at_the_editing_state():
    from composer import policies
    from composer.env.embedded import tasks
    from composer.env.environment import CodingEnv

    instances = tasks.generate(2, seed=0, split="train", difficulty=tasks.Difficulty(n_functions=1))
    rows = reference_pairs.oracle_pairs(instances, seed=0)
    assert [r["task_id"] for r in rows] == [r["instance_id"] for r in instances]
    env = CodingEnv(instances, policies.ENV_CONFIG)
    try:
        for row, instance in zip(rows, instances):
            assert row["chosen"] != row["rejected"] and row["rule"] == "oracle"
            assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
            rewards = []
            for text in (row["chosen"], row["rejected"]):
                name, args = policies.parse_tool_call(text)
                assert name == "edit" and list(args) == ["path", "new_text", "start", "end"]
                env.reset(instance=instance)
                env.call("edit", **args)
                rewards.append(env.call("submit").reward)
            assert rewards == [1.0, 0.0]  # the chosen edit solves the task, the rejected one does not
    finally:
        env.close()
    swapped = pairs.shuffled_pairs(rows, seed=1)  # no teacher votes: the control still swaps
    assert all({s["chosen"], s["rejected"]} == {r["chosen"], r["rejected"]} for s, r in zip(swapped, rows))


def test_a_task_the_student_solves_as_the_expert_gets_one_anchor_pair_with_a_slipped_edit(monkeypatch):
    """Where the student's greedy action is the expert's at every state (here: a student that replays the expert),
    the task still gets a pair: at the expert's edit, that edit over the same edit with a slip; it comes first for
    its task in the spread, as any task's first pair does."""
    from composer import policies, zoo

    profile = zoo.PROFILES["smoke"]
    student, instances = zoo.model(profile, "student"), zoo.split_tasks(profile, "train")[:2]
    expert = {}

    def as_the_expert(model, tokenizer, messages, *, max_new_tokens=160):
        return expert[len(messages)]

    def demonstrate(env, instance, **kwargs):  # the expert's calls, by where they come in the conversation
        messages, reward, info = real(env, instance, **kwargs)
        expert.clear()
        for at, m in enumerate(messages):
            if m["role"] == "assistant":
                call = m["tool_calls"][0]["function"]
                arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else call["arguments"]
                expert[at] = f"<tool_call>\n{json.dumps({'name': call['name'], 'arguments': arguments})}\n</tool_call>"
        return messages, reward, info

    real = policies.demonstrate
    monkeypatch.setattr(policies, "demonstrate", demonstrate)
    monkeypatch.setattr(policies, "next_turn", as_the_expert)
    rows = expert_pairs(instances, student, count=10, max_new_tokens=profile.max_new_tokens)
    assert [r["task_id"] for r in rows] == [i["instance_id"] for i in instances]  # one each, no more
    for row in rows:
        chosen, rejected = policies.parse_tool_call(row["chosen"]), policies.parse_tool_call(row["rejected"])
        assert chosen[0] == rejected[0] == "edit" and chosen[1]["new_text"] != rejected[1]["new_text"]
        assert {k: v for k, v in chosen[1].items() if k != "new_text"} == \
            {k: v for k, v in rejected[1].items() if k != "new_text"}  # the same edit, a slip in its text
        assert row["student_action"] == row["chosen_action"] and row["rule"] == "expert"


def test_expert_pairs_choose_the_experts_next_action_over_the_students_own():
    from composer import policies, zoo
    from composer.env.environment import CodingEnv
    from composer.models import load_model, load_tokenizer

    profile = zoo.PROFILES["smoke"]
    student, instances = zoo.model(profile, "student"), zoo.split_tasks(profile, "train")
    rows = expert_pairs(instances, student, count=3, max_new_tokens=profile.max_new_tokens)
    assert len(rows) == 3 and len({r["pair_id"] for r in rows}) == 3
    order = [i["instance_id"] for i in instances]  # spread: a task's first pair each, in task order, then seconds
    assert len({r["task_id"] for r in rows}) == 3 and sorted(rows, key=lambda r: order.index(r["task_id"])) == rows
    both = expert_pairs(instances[:2], student, count=100, max_new_tokens=profile.max_new_tokens)
    assert [r["task_id"] for r in both[:2]] == order[:2] and len(both) > 2
    assert [r["task_id"] for r in both[2:4]] == order[:2] or len({r["task_id"] for r in both[2:]}) == 1
    model, tokenizer = load_model(student), load_tokenizer(student)
    env = CodingEnv(instances, policies.ENV_CONFIG)
    try:
        for row in rows:
            instance = next(i for i in instances if i["instance_id"] == row["task_id"])
            messages, _, _ = policies.demonstrate(env, instance)
            at = 2 + 2 * row["step"]  # system, user, then an assistant call and its tool result per step
            calls = [(m["role"], m.get("tool_calls")) for m in traces.prompt_messages(messages[:at])]
            assert [(m["role"], m.get("tool_calls")) for m in row["prompt"]] == calls and row["rule"] == "expert"
            expert = messages[at]["tool_calls"][0]["function"]
            assert policies.parse_tool_call(row["chosen"]) == (expert["name"], json.loads(expert["arguments"]))
            own = policies.next_turn(model, tokenizer, row["prompt"], max_new_tokens=profile.max_new_tokens)
            assert row["rejected"] in (own, row["rejected_action"]) or policies.parse_tool_call(row["rejected"]) == \
                policies.parse_tool_call(own)  # the student's own greedy action, parsed or as text
            assert row["rejected_action"] != row["chosen_action"]
    finally:
        env.close()
    assert len(expert_pairs(instances[:1], student, count=100, max_new_tokens=profile.max_new_tokens)) < 100
