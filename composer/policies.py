"""Policies for the coding environment: a scripted expert that demonstrates, and the loop that runs a model.

    from composer import policies
    from composer.env.defences import probes
    from composer.env.environment import CodingEnv

    records, _ = probes.rewarded(5, seed=0, split="test")     # tasks with held-out probes: reset refuses the others
    env = CodingEnv(records, policies.ENV_CONFIG)
    messages, reward, info = policies.demonstrate(env, records[0], noise=policies.Noise(wrong_edit=0.5), seed=1)
    text = policies.render(tokenizer, messages)                 # the chat as the model reads it (tools included)

    model, tok = load_model(path), load_tokenizer(path)
    messages, reward, info = policies.rollout(model, tok, env, records[0], temperature=0.0)
    results = policies.rollouts(model, tok, envs, [(r, seed) for r in records])  # len(envs) episodes in lockstep
    scores = policies.evaluate(path, records, k=1)               # {instance_id: pass@1}, 16 episodes in lockstep
    scores = policies.evaluate(path, records, engine="vllm")     # the same through vLLM (GPU), all episodes in one batch

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
import functools
import json
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from composer.env.environment import CodingAction, CodingEnv, EnvConfig, gold_edits, tool_schemas
from composer.kvcache import reserved_cache
from composer.progress import bar
from composer.vllm_engine import VLLMPolicy

SYSTEM = ("You are a coding agent in a Python repository. Fix the reported bug with the tools: "
          "one tool call per turn; submit when the tests pass.")
# Short episodes and clipped observations: every token of context costs on 2 CPU cores, and a
# tiny model learns a 6-step loop far more easily than a 30-step one.
ENV_CONFIG = EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0)
ENGINES = ("transformers", "vllm")  # what generates an evaluation's turns (evaluate)
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


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens the two sequences share."""
    n = min(len(a), len(b))
    diff = (torch.tensor(a[:n], dtype=torch.long) != torch.tensor(b[:n], dtype=torch.long)).nonzero()
    return int(diff[0]) if len(diff) else n


@torch.no_grad()
def prefill(model, ids: list[int], cache: DynamicCache) -> torch.Tensor:
    """Bring `cache` to the prompt `ids` and return the logits that follow it. The cache keeps the prefix it shares
    with the prompt it last saw and encodes only the rest, so a turn costs its new messages, not the whole
    conversation again."""
    cached = cache.get_seq_length()
    keep = min(shared_prefix(getattr(cache, "token_ids", []), ids), cached, len(ids) - 1)
    if keep < cached:
        cache.crop(keep - cached)
    positions = torch.arange(keep, len(ids), device=model.device)[None]
    logits = model(input_ids=torch.tensor([ids[keep:]], device=model.device), position_ids=positions,
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
    cache.token_ids = list(ids)
    return logits


@torch.no_grad()
def decode(model, caches: list[DynamicCache], logits: list[torch.Tensor], *, eos: int | set[int],
           max_new_tokens: int, temperature: float = 0.0,
           rngs: list[torch.Generator] | None = None) -> list[list[int]]:
    """One assistant turn for several prompts at once: each row continues from its own cache (as `prefill` left it,
    `logits` its next-token logits) and stops at `eos` (an id or a set of them; kept) or the budget. The caches are copied, left-padded, into
    one batch, so each new token is one forward for all the rows still going; a row that ends leaves the batch, and
    the rows' own caches are left as they were. Greedy at temperature 0; otherwise row i samples from rngs[i] (the
    full distribution at `temperature`), so its tokens follow its own seed, not its batch."""
    stop = {eos} if isinstance(eos, int) else set(eos)
    lengths = [c.get_seq_length() for c in caches]
    width = max(lengths)
    batch = reserved_cache(model)
    for i, layer in enumerate(batch.layers):
        layer.update(*(torch.cat([F.pad(getattr(c.layers[i], name), (0, 0, width - n, 0))
                                  for c, n in zip(caches, lengths)]) for name in ("keys", "values")))
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], device=model.device)
    positions = torch.tensor(lengths, device=model.device)
    rows, out, logits = list(range(len(caches))), [[] for _ in caches], torch.stack(logits)
    for step in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            tokens = torch.cat([torch.multinomial(p, 1, generator=rngs[r]) for p, r in zip(probs, rows)])
        else:
            tokens = logits.argmax(-1)
        going = []
        for j, (row, token) in enumerate(zip(rows, tokens.tolist())):
            out[row].append(token)
            if token not in stop:
                going.append(j)
        if not going or step == max_new_tokens - 1:
            break
        if len(going) < len(rows):
            index = torch.tensor(going, device=model.device)
            batch.batch_select_indices(index)
            mask, positions, tokens, rows = mask[index], positions[index], tokens[index], [rows[j] for j in going]
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
        logits = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None],
                       past_key_values=batch, use_cache=True).logits[:, -1]
        positions = positions + 1
    return out


def next_turn(model, tokenizer, messages: list[dict], *, max_new_tokens: int = 160) -> str:
    """The model's greedy next assistant message after `messages`, as text (its tool call not parsed)."""
    cache = DynamicCache(config=model.config)
    logits = prefill(model, _prompt_ids(tokenizer, messages), cache)
    new = decode(model, [cache], [logits], eos=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                 max_new_tokens=max_new_tokens)[0]
    return tokenizer.decode(new, skip_special_tokens=False).removesuffix("<|im_end|>")


def rollout(model, tokenizer, env: CodingEnv, instance: dict, *, max_steps: int = 10, temperature: float = 0.0,
            seed: int = 0, max_new_tokens: int = 160, system: str = SYSTEM) -> tuple[list[dict], float, dict]:
    """Run the model on `instance` until the episode ends or max_steps turns: (messages, reward, info); `rollouts`
    with one episode."""
    return rollouts(model, tokenizer, [env], [(instance, seed)], max_steps=max_steps, temperature=temperature,
                    max_new_tokens=max_new_tokens, system=system)[0]


@torch.no_grad()
def rollouts(model, tokenizer, envs: list[CodingEnv], episodes: list[tuple[dict, int]], *, max_steps: int = 10,
             temperature: float = 0.0, max_new_tokens: int = 160,
             system: str = SYSTEM) -> list[tuple[list[dict], float, dict]]:
    """Run the model on each (instance, seed) episode, len(envs) of them at a time in lockstep: (messages, reward,
    info) per episode, in order.

    Each turn every running episode's conversation is rendered and brought into its own KV cache (`prefill`), and
    their next assistant messages are decoded together (`decode`) -- or, when `model` is a vllm_engine.VLLMPolicy,
    generated in one vLLM batch from the rendered conversations; then each episode's environment takes its
    message's tool call. Text with no well-formed call goes to the environment as a call of the tool "" (an error
    observation that counts as a step, as a broken call would on a real agent harness). An episode ends when its
    environment says so, after max_steps turns, or when its context cannot hold another turn. An episode's tokens
    do not depend on the others in its lockstep batch, up to the float rounding that batching brings (which can
    flip a near-tie token)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generate = model.turns if isinstance(model, VLLMPolicy) else functools.partial(transformers_turns, model)
    results = []
    # The environments' steps wait mostly on their sandboxed test runs: they run side by side.
    with ThreadPoolExecutor(max_workers=len(envs)) as pool, bar(total=len(episodes), desc="episodes",
                                                                 unit="episode") as finished:
        for start in range(0, len(episodes), len(envs)):
            state = []
            for env, (instance, seed) in zip(envs, episodes[start:start + len(envs)]):
                obs = env.reset(instance=instance)
                state.append(dict(
                    env=env, obs=obs, done=False, seed=seed,
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": obs.text}],
                    info={"instance_id": instance["instance_id"], "steps": 0, "malformed": 0, "submitted": False,
                          "truncated": False, "context_full": False}))
            running = state
            for step in range(max_steps):
                for ep in running:
                    ep["ids"] = _prompt_ids(tokenizer, ep["messages"])
                    ep["info"]["context_full"] = bool(limit and len(ep["ids"]) + max_new_tokens > limit)
                running = [ep for ep in running if not ep["info"]["context_full"]]
                if not running:
                    break
                turns = generate(running, eos=eos, max_new_tokens=max_new_tokens, temperature=temperature)
                texts = [tokenizer.decode(new, skip_special_tokens=False).removesuffix("<|im_end|>")
                         for new in turns]
                list(pool.map(_act, running, texts, [step] * len(running)))
                running = [ep for ep in running if not ep["done"]]
                if not running:
                    break
            results += [(ep["messages"], float(ep["obs"].reward or 0.0) if ep["done"] else 0.0, ep["info"])
                        for ep in state]
            finished.update(len(state))
    return results


def transformers_turns(model, running: list[dict], *, eos: int, max_new_tokens: int,
                       temperature: float) -> list[list[int]]:
    """The next turn's tokens of each running episode (its `ids`: the rendered conversation) under transformers:
    each episode's prompt into its own KV cache (`prefill`, kept across its turns), then all decoded together, each
    sampling from its own generator seeded with the episode's seed."""
    for ep in running:
        if "cache" not in ep:
            ep["cache"] = DynamicCache(config=model.config)
            ep["rng"] = torch.Generator(device=model.device).manual_seed(ep["seed"])
    logits = [prefill(model, ep["ids"], ep["cache"]) for ep in running]
    return decode(model, [ep["cache"] for ep in running], logits, eos=eos, max_new_tokens=max_new_tokens,
                  temperature=temperature, rngs=[ep["rng"] for ep in running])


def _act(ep: dict, text: str, step: int) -> None:
    """One episode's environment step on the model's message `text`, recorded in its messages and info."""
    call = parse_tool_call(text)
    call_id = f"call_{step + 1}"
    if call is None:
        ep["info"]["malformed"] += 1
        ep["obs"] = obs = ep["env"].step(CodingAction(tool="", args={}))
        ep["messages"] += [{"role": "assistant", "content": text}, tool_message(obs.text, None, None)]
    else:
        name, args = call
        ep["obs"] = obs = ep["env"].step({"tool": name, "args": args})
        ep["messages"] += [tool_call_message(name, args, call_id, TOOL_CALL.sub("", text).strip()),
                           tool_message(obs.text, call_id, name)]
    ep["info"]["steps"] += 1
    if obs.done:
        ep["done"] = True
        ep["info"].update(submitted=not obs.info.truncated, truncated=obs.info.truncated)


def evaluate(model_path, records: list[dict], *, k: int = 1, n: int | None = None, temperature: float = 0.0,
             seed: int = 0, env_config: EnvConfig = ENV_CONFIG, max_new_tokens: int = 160,
             return_rollouts: bool = False, shard: tuple[int, int] = (0, 1), device=None,
             batch_size: int | None = None, engine: str = "transformers"):
    """Unbiased pass@k per task ({instance_id: score}) from n >= k rollouts each (n defaults to k).

    Sampling with temperature 0 is greedy, so n > 1 then only repeats the same rollout. With
    return_rollouts, also the list of (instance_id, messages, reward, info). shard=(rank, world): only tasks
    rank, rank + world, ..., each with the seeds it has in the whole list, so a launch's shards together are
    the one-process evaluation (up to the float rounding of other lockstep batches, see rollouts). device: where
    the model runs (default: the GPU when there is one). batch_size: episodes run in lockstep (rollouts); default 16
    under transformers (its padded batch), and every episode of the shard under vLLM, which schedules its own batches.
    engine: "transformers" (CPU or GPU) or "vllm" (the GPU path: composer.vllm_engine, one engine per shard's
    process; device does not apply)."""
    from composer.models import load_model, load_tokenizer
    from composer.stats import pass_at_k

    rank, world = shard
    if not 0 <= rank < world:
        raise ValueError(f"shard {shard}: (rank, world) with 0 <= rank < world")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (episodes in lockstep), got {batch_size}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    n = n or k
    if engine == "vllm":
        from composer import vllm_engine

        model = vllm_engine.load(model_path, rank=rank, local_rank=int(os.environ.get("LOCAL_RANK", rank)),
                                 world=world)
    else:
        model = load_model(model_path, device=device or ("cuda" if torch.cuda.is_available() else None)).eval()
    tokenizer = load_tokenizer(model_path)
    mine = [(i, record) for i, record in enumerate(records) if i % world == rank]
    episodes = [(record, seed + 1000 * i + j) for i, record in mine for j in range(n)]
    if batch_size is None:
        batch_size = len(episodes) if engine == "vllm" else 16
    # at least one environment: a shard may have no tasks
    envs = [CodingEnv(records, env_config) for _ in range(max(1, min(batch_size, len(episodes))))]
    try:
        done = rollouts(model, tokenizer, envs, episodes, max_steps=env_config.max_steps, temperature=temperature,
                        max_new_tokens=max_new_tokens)
    finally:
        for env in envs:
            env.close()
    runs = [(record["instance_id"], *result) for (record, _), result in zip(episodes, done)]
    scores = {}
    for i, (_, record) in enumerate(mine):
        rewards = [reward for _, _, reward, _ in runs[i * n:(i + 1) * n]]
        scores[record["instance_id"]] = pass_at_k(n, sum(r == 1.0 for r in rewards), k)
    return (scores, runs) if return_rollouts else scores
