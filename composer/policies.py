"""Policies for the coding environment: a scripted expert that demonstrates, and the loop that runs a model.

    from composer import policies
    from composer.env import tasks
    from composer.env.environment import CodingEnv

    records = tasks.generate(5, seed=0, split="test")
    env = CodingEnv(records, policies.ENV_CONFIG)
    messages, reward, info = policies.demonstrate(env, records[0], noise=policies.Noise(wrong_edit=0.5), seed=1)
    text = policies.render(tokenizer, messages)                 # the chat as the model reads it (tools included)

    model, tok = load_model(path), load_tokenizer(path)
    messages, reward, info = policies.rollout(model, tok, env, records[0], temperature=0.0)
    scores = policies.evaluate(path, records, k=1)               # {instance_id: pass@1}

Both policies write the same conversation, in the format TRL and the environment use: a system
message, the task as the user message (problem statement, instructions and file list: what
`env.reset` returns), then one assistant message per step carrying an OpenAI-style `tool_calls`
entry and one `tool` message with the observation. Qwen3's chat template, given the tool
schemas, renders an assistant step as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`
and a tool message as a user turn holding `<tool_response>...</tool_response>`. The model is
always prompted with that canonical rendering, so what it reads at evaluation is byte for byte
what it was trained on (composer.zoo), and what an RL trainer will show it.

The expert (`demonstrate`) needs only the gold patch: run the tests, view the file, rewrite the
whole function (or class) that holds the bug with its fixed text (`gold_fix`), re-run the tests,
submit. `Noise` makes it human: an extra exploratory step (search for the function and view just
it, or list the package first), a plausible wrong first edit (a slip in a line the fix changes)
that the failing test run then corrects, or a submit without re-running the tests.
"""

import ast
import json
import random
import re
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from composer.env.environment import CodingAction, CodingEnv, EnvConfig, gold_edits, tool_schemas

SYSTEM = ("You are a coding agent in a Python repository. Fix the reported bug with the tools: "
          "one tool call per turn; submit when the tests pass.")
# Short episodes and clipped observations: every token of context costs on 2 CPU cores, and a
# tiny model learns a 6-step loop far more easily than a 30-step one.
ENV_CONFIG = EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Messages


def tool_call_message(name: str, arguments: dict, call_id: str, content: str = "") -> dict:
    """An assistant message with one OpenAI-style tool call (arguments as a JSON string, as the API sends)."""
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def tool_message(text: str, call_id: str | None, name: str | None) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


def render(tokenizer, messages: list[dict], *, add_generation_prompt: bool = False) -> str:
    """The chat as the model reads it: Qwen3 template with the environment's tool schemas in the system turn."""
    return tokenizer.apply_chat_template(messages, tools=tool_schemas(), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def parse_tool_call(text: str) -> tuple[str, dict] | None:
    """(name, arguments) of the first `<tool_call>` JSON in a completion, or None when there is none or it is
    malformed. An unterminated block still parses if its JSON is whole (generation may stop at the budget)."""
    m = TOOL_CALL.search(text)
    if not m:
        return None
    try:
        call = json.loads(m.group(1))
        if not isinstance(call, dict):
            return None
        args = call.get("arguments", {})
        if isinstance(args, str):  # OpenAI style: the arguments as a JSON string
            args = json.loads(args)
    except json.JSONDecodeError:
        return None
    if not isinstance(call.get("name"), str) or not isinstance(args, dict):
        return None
    return call["name"], args


def tool_calls(messages: list[dict]) -> list[tuple[str, dict]]:
    """(name, arguments) of every assistant tool call in a conversation."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]


# ---------------------------------------------------------------------------------------------
# The scripted expert


@dataclass(frozen=True)
class Noise:
    """Per-episode probabilities of the expert's human-like detours (all off: the shortest solution)."""

    explore: float = 0.0  # an extra exploratory step (list the package, or view the failing test)
    wrong_edit: float = 0.0  # a plausible wrong first edit of the same lines, corrected after a test run
    skip_rerun: float = 0.0  # submit right after the fix, without re-running the tests


def _units(source: str) -> list[tuple[str, str, int, int]]:
    """(keyword, name, first line, last line) of every top-level def/class of a module."""
    return [("class" if isinstance(n, ast.ClassDef) else "def", n.name, n.lineno, n.end_lineno)
            for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def _apply(source: str, edits: list[dict]) -> str:
    lines = source.splitlines(keepends=True)
    for e in edits:  # last first, so earlier line numbers stay valid
        lines[e["start"] - 1:e["end"]] = e["new_text"].splitlines(keepends=True)
    return "".join(lines)


def gold_fix(instance: dict, source: str) -> dict:
    """The gold patch as one edit() of the buggy module `source`: the whole top-level function or class that
    holds the bug, replaced by its fixed text.

    Rewriting the unit rather than the one changed line is how the expert works because it is what a
    tiny model can learn: the line numbers come from the view it just read (the unit's first and last
    line), and the text is the function as the model knows it, with no need to spot which line differs."""
    edits = gold_edits(instance)
    if len({e["path"] for e in edits}) != 1:
        raise ValueError(f"{instance['instance_id']}: the gold patch edits more than one file")
    fixed = _apply(source, edits).splitlines(keepends=True)
    buggy = {name: (first, last) for _, name, first, last in _units(source)}
    touched = [(kind, name, first, last) for kind, name, first, last in _units("".join(fixed))
               if name in buggy and "".join(fixed[first - 1:last]) != "".join(
                   source.splitlines(keepends=True)[buggy[name][0] - 1:buggy[name][1]])]
    if len(touched) != 1:
        raise ValueError(f"{instance['instance_id']}: the gold patch changes {len(touched)} top-level units, not 1")
    _, name, first, last = touched[0]
    return {"path": edits[0]["path"], "start": buggy[name][0], "end": buggy[name][1],
            "new_text": "".join(fixed[first - 1:last])}


# A wrong first edit: the fixed unit with one operator or digit changed, the kind of slip a human makes.
SLIPS = [(r"<=", "<"), (r"(?<![<>=!])<(?!=)", "<="), (r">=", ">"), (r"(?<![<>=!-])>(?!=)", ">="),
         (r"==", "!="), (r"!=", "=="), (r" \+ ", " - "), (r" - ", " + "), (r" \* ", " + "), (r"\b1\b", "2"),
         (r"\b0\b", "1"), (r"\b2\b", "1")]


def _slip(fixed: str, buggy: str, rng: random.Random) -> str | None:
    """`fixed` with one slip in a line the fix changed (a wrong fix of the bug, not a typo elsewhere)."""
    lines, old = fixed.splitlines(keepends=True), set(buggy.splitlines(keepends=True))
    options = []
    for i, line in enumerate(lines):
        if line in old:
            continue
        for pattern, repl in SLIPS:
            for m in re.finditer(pattern, line):
                options.append("".join(lines[:i]) + line[:m.start()] + repl + line[m.end():] + "".join(lines[i + 1:]))
    options = [o for o in options if o != fixed]
    return rng.choice(options) if options else None


def demonstrate(env: CodingEnv, instance: dict, *, noise: Noise = Noise(), seed: int = 0,
                system: str = SYSTEM) -> tuple[list[dict], float, dict]:
    """One expert episode on `instance`: (messages, reward, info). Needs the record's gold patch."""
    rng = random.Random(seed)
    obs = env.reset(instance=instance)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": obs.text}]

    def act(name, **args):
        call_id = f"call_{len(messages) // 2}"
        obs = env.call(name, **args)
        messages.extend([tool_call_message(name, args, call_id), tool_message(obs.text, call_id, name)])
        return obs

    path = gold_edits(instance)[0]["path"]
    source = (env.repo / path).read_text()
    fix = gold_fix(instance, source)
    act("run_tests")
    if rng.random() < noise.explore:
        if rng.random() < 0.5:  # look the function up, then read just it
            kind, unit = next((k, n) for k, n, first, _ in _units(source) if first == fix["start"])
            act("search", pattern=f"{kind} {unit}", path=path)
            act("view", path=path, start=fix["start"], end=fix["end"])
        else:  # look around the package first
            act("list_files", path=path.rsplit("/", 1)[0])
            act("view", path=path)
    else:
        act("view", path=path)
    wrong = _slip(fix["new_text"], "".join(source.splitlines(keepends=True)[fix["start"] - 1:fix["end"]]), rng)
    if wrong is not None and rng.random() < noise.wrong_edit:
        act("edit", path=path, new_text=wrong, start=fix["start"], end=fix["end"])
        outcomes = act("run_tests").info.tests or {}
        if not all(outcomes.values()):  # the slip failed: put the right text over it
            act("edit", path=path, new_text=fix["new_text"], start=fix["start"],
                end=fix["start"] + len(wrong.splitlines()) - 1)
    else:
        act("edit", path=path, new_text=fix["new_text"], start=fix["start"], end=fix["end"])
    if rng.random() >= noise.skip_rerun:
        act("run_tests")
    obs = act("submit")
    return messages, float(obs.reward or 0.0), {"steps": obs.info.step, "instance_id": instance["instance_id"],
                                                "submitted": obs.done and not obs.info.truncated}


# ---------------------------------------------------------------------------------------------
# A model as the policy


def _prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    return tokenizer(render(tokenizer, messages, add_generation_prompt=True), add_special_tokens=False).input_ids


@torch.no_grad()
def generate_turn(model, tokenizer, ids: list[int], cache: DynamicCache, *, temperature: float,
                  max_new_tokens: int) -> list[int]:
    """One assistant turn: new token ids after `ids`, ending at <|im_end|> or the budget.

    `cache` holds the keys/values of an earlier prompt; the shared prefix is kept and only the
    rest is encoded, so a turn costs its new observation, not the whole conversation again."""
    keep = 0
    cached = cache.get_seq_length()
    prev = getattr(cache, "token_ids", [])
    while keep < min(cached, len(prev), len(ids) - 1) and prev[keep] == ids[keep]:
        keep += 1
    if keep < cached:
        cache.crop(keep - cached)
    sample = temperature > 0
    out = model.generate(
        input_ids=torch.tensor([ids], device=model.device), attention_mask=torch.ones(1, len(ids), dtype=torch.long,
                                                                                      device=model.device),
        past_key_values=cache, max_new_tokens=max_new_tokens, do_sample=sample,
        temperature=temperature if sample else None, top_p=None, top_k=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id)
    new = out[0, len(ids):].tolist()
    cache.token_ids = ids + new
    return new


def next_turn(model, tokenizer, messages: list[dict], *, max_new_tokens: int = 160) -> str:
    """The model's greedy next assistant message after `messages`, as text (its tool call not parsed)."""
    new = generate_turn(model, tokenizer, _prompt_ids(tokenizer, messages), DynamicCache(), temperature=0.0,
                        max_new_tokens=max_new_tokens)
    return tokenizer.decode(new, skip_special_tokens=False).removesuffix("<|im_end|>")


def rollout(model, tokenizer, env: CodingEnv, instance: dict, *, max_steps: int = 10, temperature: float = 0.0,
            seed: int = 0, max_new_tokens: int = 160, system: str = SYSTEM) -> tuple[list[dict], float, dict]:
    """Run the model on `instance` until the episode ends or max_steps turns: (messages, reward, info).

    Each turn renders the conversation, generates one assistant message and parses its tool call;
    text with no well-formed call goes to the environment as a call of the tool "" (an error
    observation that counts as a step, as a broken call would on a real agent harness)."""
    obs = env.reset(instance=instance)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": obs.text}]
    limit = getattr(model.config, "max_position_embeddings", None)
    info = {"instance_id": instance["instance_id"], "steps": 0, "malformed": 0, "submitted": False,
            "truncated": False, "context_full": False}
    cache, done = DynamicCache(), False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for step in range(max_steps):
            ids = _prompt_ids(tokenizer, messages)
            if limit and len(ids) + max_new_tokens > limit:
                info["context_full"] = True
                break
            new = generate_turn(model, tokenizer, ids, cache, temperature=temperature, max_new_tokens=max_new_tokens)
            text = tokenizer.decode(new, skip_special_tokens=False).removesuffix("<|im_end|>")
            call = parse_tool_call(text)
            call_id = f"call_{step + 1}"
            if call is None:
                info["malformed"] += 1
                obs = env.step(CodingAction(tool="", args={}))
                messages += [{"role": "assistant", "content": text}, tool_message(obs.text, None, None)]
            else:
                name, args = call
                obs = env.step({"tool": name, "args": args})
                content = TOOL_CALL.sub("", text).strip()
                messages += [tool_call_message(name, args, call_id, content), tool_message(obs.text, call_id, name)]
            info["steps"] += 1
            if obs.done:
                done = True
                info.update(submitted=not obs.info.truncated, truncated=obs.info.truncated)
                break
    reward = float(obs.reward or 0.0) if done else 0.0
    return messages, reward, info


def evaluate(model_path, records: list[dict], *, k: int = 1, n: int | None = None, temperature: float = 0.0,
             seed: int = 0, env_config: EnvConfig = ENV_CONFIG, max_new_tokens: int = 160,
             return_rollouts: bool = False, shard: tuple[int, int] = (0, 1), device=None):
    """Unbiased pass@k per task ({instance_id: score}) from n >= k rollouts each (n defaults to k).

    Sampling with temperature 0 is greedy, so n > 1 then only repeats the same rollout. With
    return_rollouts, also the list of (instance_id, messages, reward, info). shard=(rank, world): only tasks
    rank, rank + world, ..., each with the seeds it has in the whole list, so a launch's shards together are
    exactly the one-process evaluation. device: where the model runs (default: the GPU when there is one)."""
    from composer.models import load_model, load_tokenizer
    from composer.stats import pass_at_k

    rank, world = shard
    if not 0 <= rank < world:
        raise ValueError(f"shard {shard}: (rank, world) with 0 <= rank < world")
    n = n or k
    device = device or ("cuda" if torch.cuda.is_available() else None)
    model, tokenizer = load_model(model_path, device=device), load_tokenizer(model_path)
    model.eval()
    env = CodingEnv(records, env_config)
    scores, runs = {}, []
    try:
        for i, record in enumerate(records):
            if i % world != rank:
                continue
            rewards = []
            for j in range(n):
                messages, reward, info = rollout(model, tokenizer, env, record, max_steps=env_config.max_steps,
                                                 temperature=temperature, seed=seed + 1000 * i + j,
                                                 max_new_tokens=max_new_tokens)
                rewards.append(reward)
                runs.append((record["instance_id"], messages, reward, info))
            scores[record["instance_id"]] = pass_at_k(n, sum(r == 1.0 for r in rewards), k)
    finally:
        env.close()
    return (scores, runs) if return_rollouts else scores
