"""A pilot before any GPU: the student through an OpenAI-compatible API, in CodingEnv's own tools, on real
SWE-bench instances; its base rate, turns, tokens, dollars and seconds measured, every episode kept as a trace.

    python -m composer pilot --student qwen/qwen3-8b --pool verified --episodes 50 --dry-run   # priced; nothing sent
    python -m composer pilot --student qwen/qwen3-8b --pool verified --episodes 50 \\
        --instances verified.jsonl --out runs/pilot                                           # runs it (paid)
    python -m composer pilot --student student --base-url http://127.0.0.1:8000/v1 --pool embedded --episodes 8
    python -m composer plan --from-pilot runs/pilot          # the plan with the pilot's measured numbers

    from composer.costs import pilot
    spec = pilot.student_spec("qwen/qwen3-8b")                # a TeacherSpec: endpoint, key's variable, provider pin
    ids = pilot.pool_ids("verified")                          # the shipped index (data/), no download
    print(pilot.price(spec, tasks=13, samples=4))             # the dry run's figures
    summary = asyncio.run(pilot.run(spec, records, "runs/pilot", samples=4, budget_usd=20.0))

Why: every power and cost figure of `composer plan` rests on the student's base pass@1 on the pool, how often two
of its runs disagree and how much tasks differ. Published runs put Qwen3-8B (no thinking) at 3.6 % of SWE-bench
Verified before RL: a student that low leaves little room for a 2-point effect, and that is worth knowing before a
GPU node is rented. OpenRouter serves the same students for cents an episode; any OpenAI-compatible server (vLLM's,
`python -m composer serve`) serves a checkpoint the same way.

How an episode runs: CodingEnv.reset on the task (a real instance in its container, composer.env.real.container; an
embedded task in the sandbox), then turns of one chat completion with the environment's tool schemas (the actions
004 trains on: view, edit, run_tests, submit, ...), the first tool call executed, until submit, the step limit, or a
model call that fails after the SDK's retries. The reward is the environment's grading (1.0 resolved).

Paid-run machinery (composer.teachers, as 001's replay): one sqlite store in --out with every answered turn (a rerun
or a resumed kill re-pays no answer it already has: the key is the student, its sampling settings, the episode and
the student's own calls so far, so tool outputs that differ in their timings still find it) and a ledger row per
HTTP attempt, written at its worst case before it is sent, so the budget cap counts calls in flight and holds
across kills. The key is read from the environment variable the spec names (OPENROUTER_API_KEY for OpenRouter,
STUDENT_KEY_ENV for any other endpoint), never written anywhere. The SDK retries 408/409/429/5xx; a turn that still
fails, or anything that raises in an episode (a container that does not start, an answer of an unexpected shape),
ends that episode as `error` (not graded, not counted in pass@1, retried by a rerun), never the run; 402 and 401/403
stop new episodes. A completion without a usable tool call is a malformed turn: the environment answers it with an
error, and it counts as a step. A completed episode is written atomically to episodes/ (a kill loses at most the
episodes in flight; their answered turns stay in the store).

What it writes in --out: pilot.json (the summary below, with provenance), traces.jsonl (every completed episode in
composer.traces' schema, as 002a writes them: 001 and 003 read it as a traces source), within-reach.jsonl (the
records of the tasks the student solved at least once: 004's test_tasks for an A/B on the tasks within its reach,
which its verdict then says, and `plan --budget-usd --pool-file` prices), episodes/*.json, pilot.sqlite.
The summary: pass@1 with a Wilson interval over the episodes corrected for their clustering in tasks
(stats.clustered_wilson_interval), pass@k at the samples per task (the share of tasks solved at least once, Wilson
over tasks), discordance (how often two runs of one task disagree: what composer.costs.power calls discordance), the
task spread of the base rate, turns, tokens and dollars an episode, and seconds per turn by phase.
"""

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from composer import files, prices, stats, teachers
from composer.costs import compute
from composer.paths import ROOT

POOLS = {  # name: (index file, its id column's rows, where the full records are)
    "verified": (ROOT / "data/swebench-verified/verified-test.tsv", "princeton-nlp/SWE-bench_Verified"),
    "lite": (ROOT / "data/swebench-lite/splits/lite-test.tsv", "SWE-bench/SWE-bench_Lite"),
    "lite:train": (ROOT / "data/swebench-lite/splits/train.txt", "SWE-bench/SWE-bench_Lite"),
    "lite:test": (ROOT / "data/swebench-lite/splits/test.txt", "SWE-bench/SWE-bench_Lite"),
    "lite-dev": (ROOT / "data/swebench-lite/splits/lite-dev.tsv", "SWE-bench/SWE-bench_Lite (split dev)"),
}
EMBEDDED = "embedded"  # composer.env.embedded's generated tasks (test split): the offline rehearsal
# A pool's name + PYTEST: its tasks whose tests pytest runs, the ones 004 grades and the plan prices
# (composer.costs.power.named_pools): a base rate measured on the pool the design will use
PYTEST = ":pytest"
SUMMARY_FILE, TRACES_FILE, STORE_FILE, EPISODES_DIR = "pilot.json", "traces.jsonl", "pilot.sqlite", "episodes"
WITHIN_REACH_FILE = "within-reach.jsonl"  # the records of the tasks the student solved at least once (module doc)
SCHEMA = 1
STUDENT_KEY_ENV = "COMPOSER_STUDENT_API_KEY"  # the key of a non-OpenRouter endpoint (vllm serve --api-key ...)
LIVE_004 = ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml"
# The student's framing, as the zoo and 002a prompt it (composer.policies.SYSTEM; not imported: it loads torch).
SYSTEM = ("You are a coding agent in a Python repository. Fix the reported bug with the tools: "
          "one tool call per turn; submit when the tests pass.")


class PilotError(RuntimeError):
    """Something stops the pilot before anything is paid: the message names the input and the fix."""


# ---------------------------------------------------------------------------------------------------------
# What is run: the student's endpoint, the pool


def student_spec(model: str, *, base_url: str = teachers.OPENROUTER, api_key_env: str | None = None,
                 provider: list[str] | None = None, temperature: float = 1.0, max_tokens: int = 4096,
                 timeout_s: float = 600.0, max_retries: int = 3) -> teachers.TeacherSpec:
    """The student's endpoint as a composer.teachers spec (the same client, store and budget guard as 001's teachers).
    Defaults as 004's live GRPO samples: temperature 1.0, 4,096 tokens a turn. The key's variable defaults to
    OPENROUTER_API_KEY for OpenRouter and to STUDENT_KEY_ENV for any other endpoint, so an OpenRouter key is never
    sent elsewhere unless named."""
    api_key_env = api_key_env or ("OPENROUTER_API_KEY" if base_url.rstrip("/") == teachers.OPENROUTER
                                  else STUDENT_KEY_ENV)
    return teachers.TeacherSpec(name="student", model=model, base_url=base_url, api_key_env=api_key_env,
                                provider=provider or [], temperature=temperature, max_tokens=max_tokens,
                                timeout_s=timeout_s, max_retries=max_retries, mode="samples",
                                expected_output_tokens=0)


def pool_ids(pool: str) -> list[str]:
    """The instance ids of a named pool (POOLS; + PYTEST: its tasks whose tests pytest runs), from the index shipped
    in data/ (no download)."""
    base = pool.removesuffix(PYTEST)
    if base not in POOLS:
        raise PilotError(f"unknown pool {pool!r}: one of {', '.join([*POOLS, EMBEDDED])}, each but {EMBEDDED} also "
                         f"with {PYTEST} (its tasks whose tests pytest runs), or --instances FILE")
    path = POOLS[base][0]
    lines = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    rows = ([dict(zip(lines[0], line)) for line in lines[1:]] if path.suffix == ".tsv" else
            [{"instance_id": line[0]} for line in lines])
    if pool == base:
        return [r["instance_id"] for r in rows]
    from composer.env.real import swebench

    known = {r["instance_id"]: r for r in swebench.index("lite")}  # a half of 004's split: its rows in Lite's index
    return swebench.graded_by_pytest([known.get(r["instance_id"], r) for r in rows])


def choose(ids: list[str], tasks: int, seed: int) -> list[str]:
    """`tasks` ids drawn without replacement (all of them when there are fewer), in a seeded order."""
    return sorted(random.Random(seed).sample(sorted(ids), min(tasks, len(ids))))


def records_for(pool: str, ids: list[str], instances: str | None, *, seed: int = 0) -> list[dict]:
    """The full records of `ids`: from --instances (a .json/.jsonl/.parquet of SWE-bench records, or a Hugging Face
    name), else the pool's dataset on Hugging Face; embedded tasks are generated, each with held-out probes."""
    if pool == EMBEDDED:
        from composer.env.defences import probes

        return probes.rewarded(len(ids), seed=seed, split="test")[0]
    from composer.env.real import swebench

    source = instances or POOLS[pool.removesuffix(PYTEST)][1].split(" ")[0]
    split = "dev" if pool.removesuffix(PYTEST) == "lite-dev" and not instances else "test"
    try:
        found = {r["instance_id"]: r for r in swebench.load_instances(source, split=split)}
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        raise PilotError(f"the records of pool {pool!r}: {e}") from e
    missing = [i for i in ids if i not in found]
    if missing:
        raise PilotError(f"{len(missing)} of the {len(ids)} chosen instances are not in {source} (e.g. "
                         f"{missing[0]}): pass --instances with the pool's records")
    return [found[i] for i in ids]


# ---------------------------------------------------------------------------------------------------------
# The dry run: priced from the shipped real trajectories' turns and tokens


def trajectory_workload(max_turns: int) -> dict:
    """Turns, prompt and completion tokens of an episode in the 23 shipped real trajectories (mini-swe-agent,
    DeepSeek-chat, SWE-bench Lite dev: the tokens its provider billed), each cut at `max_turns` turns as the pilot's
    episodes are: the mean and the largest episode."""
    from composer import traces

    by_trace = traces.group_traces(traces.import_real_traces(), on_error="collect")
    rows = []
    for steps in by_trace.values():
        steps = steps[:max_turns]
        usage = [((s.meta or {}).get("usage") or {}) for s in steps]
        rows.append((len(steps), sum(u.get("prompt_tokens") or 0 for u in usage),
                     sum(u.get("completion_tokens") or 0 for u in usage)))
    turns, prompt, completion = (sorted(col) for col in zip(*rows))
    return {"episodes": len(rows), "source": "data/real-traces: mini-swe-agent, DeepSeek-chat, SWE-bench Lite dev",
            "turns": {"mean": sum(turns) / len(rows), "max": turns[-1]},
            "prompt_tokens": {"mean": sum(prompt) / len(rows), "max": prompt[-1]},
            "completion_tokens": {"mean": sum(completion) / len(rows), "max": completion[-1]}}


def price(spec: teachers.TeacherSpec, *, tasks: int, samples: int, max_turns: int = 30, real: bool = True) -> dict:
    """What the pilot costs before anything is sent: dollars (at the student's OpenRouter price, genai-prices,
    for an episode as long as the shipped trajectories' mean and as their longest), and the container hours of its
    episodes (composer.costs.compute's assumed seconds of a tool call, an episode's start and a grading). ESTIMATES."""
    try:
        table = prices.openrouter_prices(spec.model)
    except LookupError as e:
        raise PilotError(f"no OpenRouter price for {spec.model!r} in genai-prices: name an OpenRouter model slug "
                         "(e.g. qwen/qwen3-8b), or run it and read the dollars it reports") from e
    w = trajectory_workload(max_turns)
    episodes = tasks * samples

    def usd(which):
        return (w["prompt_tokens"][which] * table.input + w["completion_tokens"][which] * table.output) / 1e6

    turns = w["turns"]["mean"]
    container_s = compute.START_S + turns * compute.TOOL_S + compute.GRADING_S if real else None
    return {"student": spec.model, "tasks": tasks, "samples": samples, "episodes": episodes,
            "usd_per_episode": {"mean": usd("mean"), "longest": usd("max")},
            "usd": {"mean": episodes * usd("mean"), "longest": episodes * usd("max")},
            "prices_per_million": {"input": table.input, "output": table.output},
            "container_hours": None if container_s is None else episodes * container_s / 3600,
            "container_s_per_episode": container_s, "workload": w,
            "price_source": prices.price_provenance([spec.model])["source"],
            "assumptions": f"an episode of {turns:.0f} turns and tokens as the shipped trajectories' first {max_turns} "
                           "(no prompt caching); "
                           f"container seconds: start {compute.START_S:g}, {compute.TOOL_S:.3g} a tool call, "
                           f"grading {compute.GRADING_S:g} (composer/costs/compute.py)"}


# ---------------------------------------------------------------------------------------------------------
# Before anything is paid


def student_prices(spec: teachers.TeacherSpec):
    """The budget guard's prices of the student (teachers.endpoint_prices: $0 for an unknown model on loopback);
    PilotError where no price is known (the cap could not hold)."""
    try:
        return teachers.endpoint_prices(spec)
    except LookupError as e:
        raise PilotError(f"{e}: name the model as OpenRouter does (e.g. qwen/qwen3-8b), or serve it on this "
                         "machine") from e


def preflight(spec: teachers.TeacherSpec, records: list[dict]) -> list[str]:
    """Everything that would stop the run, checked before any completion is sent: the key's variable, the endpoint
    and the model it serves (GET /models, free), and each real instance's container engine and image. Raises
    PilotError naming the fix; returns notes (e.g. the endpoint does not say whether the model calls tools)."""
    from composer.env.real import container, swebench

    try:
        key = teachers.api_key(spec)  # the run's own rule: the OpenRouter key goes to OpenRouter only
    except RuntimeError as e:
        raise PilotError(f"{e}; nothing was sent. The key is read from there only, never from params or "
                         "files") from e
    student_prices(spec)
    try:
        response = httpx.get(spec.base_url.rstrip("/") + "/models", timeout=30.0,
                             headers=None if key == teachers.PLACEHOLDER_KEY else {"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as e:
        raise PilotError(f"--base-url {spec.base_url}: no answer to GET /models ({type(e).__name__}: {e}); check "
                         "the URL (an OpenAI-compatible API ends in /v1) and that the server runs") from e
    if response.status_code != 200:
        raise PilotError(f"--base-url {spec.base_url}: GET /models answered HTTP {response.status_code}; is this "
                         "an OpenAI-compatible API (its URL ends in /v1)?")
    try:
        served = {m["id"]: m for m in response.json()["data"]}
    except (ValueError, KeyError, TypeError) as e:
        raise PilotError(f"--base-url {spec.base_url}: GET /models is not an OpenAI model list") from e
    if spec.model not in served:
        close = sorted(m for m in served if spec.model.split("/")[-1].lower() in m.lower())[:5]
        raise PilotError(f"{spec.base_url} does not serve {spec.model!r}" + (f"; similar: {', '.join(close)}" if close
                         else f"; it serves {len(served)} models (GET {spec.base_url}/models)"))
    notes = []
    supported = served[spec.model].get("supported_parameters")
    if supported is not None and "tools" not in supported:
        raise PilotError(f"{spec.model} on {spec.base_url} does not take tools (supported_parameters: "
                         f"{', '.join(supported)}): the pilot needs tool calls")
    if supported is None:
        notes.append(f"{spec.base_url} does not list supported parameters: tool calling is not checked beforehand")
    real = [r for r in records if swebench.is_real(r)]
    blocked = {r["instance_id"]: p for r in real if (p := container.problems(r))}
    if blocked:
        iid, problems = next(iter(blocked.items()))
        raise PilotError(f"{len(blocked)} of {len(real)} real instances cannot run here, e.g. {iid}: "
                         + "; ".join(problems))
    return notes


# ---------------------------------------------------------------------------------------------------------
# The run


def tool_call_of(message: dict) -> tuple[str, dict] | str:
    """The first tool call of an assistant message as (name, arguments), or why there is none usable."""
    calls = message.get("tool_calls") or []
    if not calls:
        return "no tool call in the reply"
    function = calls[0].get("function") if isinstance(calls[0], dict) else None
    if not isinstance(function, dict):
        return "a tool call without a function"
    arguments = function.get("arguments") or "{}"
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments  # some servers send an object
    except ValueError:
        return f"the arguments of {function.get('name')!r} are not JSON"
    if not isinstance(arguments, dict) or not function.get("name"):
        return "a tool call needs a name and a JSON object of arguments"
    return function["name"], arguments


def turn_key(spec: teachers.TeacherSpec, settings: dict, episode: str, calls: list) -> str:
    """The store's key of a turn: the student, its sampling settings, the episode and the student's calls so far.
    The environment's answers are left out, so a resumed episode finds its turns again when a tool's output
    differs only in what varies run to run (timings); the endpoint's URL too (a local server's port changes from
    run to run; `claim` keeps one run folder to one student and endpoint host)."""
    canonical = json.dumps({"student": spec.model, "settings": settings, "episode": episode, "calls": calls},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def claim(out: Path, spec: teachers.TeacherSpec) -> None:
    """Mark out as this student's run folder (student.json), or refuse one another student or host began."""
    mine = {"model": spec.model, "host": urlsplit(spec.base_url).hostname}
    marker = out / "student.json"
    if marker.exists():
        theirs = json.loads(marker.read_text())
        if theirs != mine:
            raise PilotError(f"{out} holds a pilot of {theirs['model']} at {theirs['host']}, not {spec.model} at "
                             f"{mine['host']}: its stored answers are not this student's; use another --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        files.write_atomic(marker, json.dumps(mine) + "\n")


def episode_file(out: Path, episode: str) -> Path:
    return out / EPISODES_DIR / (hashlib.sha256(episode.encode()).hexdigest()[:16] + ".json")


STOPS = {"budget": "the budget cap", "payment_required": "the account's credit (HTTP 402)",
         "auth": "the key was refused (HTTP 401/403)"}  # faults after which no further call can succeed


async def ask(client: teachers.Teacher, messages: list[dict], tools: list[dict], key: str,
              sample: int) -> tuple[dict | None, teachers.Sent | None]:
    """One turn's answer: from the store (nothing sent) or sent and stored; (None, the failed Sent) on a fault."""
    spec, store = client.spec, client.store
    stored = store.answer(key)
    if stored is not None:
        return stored, None
    body = {"model": spec.model, "messages": messages, "tools": tools, "max_tokens": spec.max_tokens,
            "temperature": spec.temperature, "usage": {"include": True}}
    if spec.provider:  # pinned, no fallbacks; a provider that cannot honour `tools` refuses, never drops it
        body["provider"] = {"order": spec.provider, "allow_fallbacks": False, "require_parameters": True}
    shown = [*messages, {"role": "system", "content": json.dumps(tools)}]  # the tool schemas are prompt tokens too
    sent = await client.send(body, key, teachers.worst_case_usd(client.prices, shown, spec.max_tokens))
    choice = (sent.data or {}).get("choices", [None])[0] if sent.error_kind is None else None
    if sent.error_kind is None and not (isinstance(choice, dict) and isinstance(choice.get("message") or {}, dict)):
        sent.error_kind, sent.error = "provider_error", f"a choice that is not a message: {json.dumps(choice)[:200]}"
    if sent.error_kind is not None:
        return None, sent
    stored = {"message": client.redacted(json.dumps(choice.get("message") or {})),
              "finish_reason": choice.get("finish_reason"), "model_used": sent.data.get("model"),
              "provider": sent.data.get("provider"), "prompt_tokens": sent.usage["prompt_tokens"] or 0,
              "completion_tokens": sent.usage["completion_tokens"] or 0, "cached_tokens": sent.usage["cached_tokens"],
              "usd": sent.usage.get("cost_usd") or 0.0, "unsettled_usd": sent.unsettled_usd,
              "latency_s": sent.latency_s, "attempts": sent.attempts, "simulated": sent.simulated}
    store.save(key, spec.name, spec.model, sample, stored)
    return stored, sent


def act(reply: dict, turn: int):
    """The environment's action for a reply, the assistant message the chat keeps, and the answer to it (its content
    filled in after the step): the first tool call, or, with none usable, an empty call the environment refuses."""
    from composer.env.environment import CodingAction

    content = reply.get("content") or ""
    call = tool_call_of(reply)
    if isinstance(call, str):
        return CodingAction(tool="", args={}), call, {"role": "assistant", "content": content}, {"role": "user"}
    name, arguments = call
    call_id = reply["tool_calls"][0].get("id") or f"call_{turn}"
    assistant = {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    return CodingAction(tool=name, args=arguments), None, assistant, {"role": "tool", "tool_call_id": call_id}


def new_result(record: dict, sample: int) -> dict:
    return {"episode": f"{record['instance_id']}#{sample}", "instance_id": record["instance_id"], "sample": sample,
            "reward": None, "submitted": False, "truncated": False, "error": None, "turns": 0, "malformed": 0,
            "faults": {}, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "usd": 0.0,
            "unsettled_usd": 0.0, "answers_from_store": 0, "simulated": False,
            "seconds": {"start": 0.0, "generate": 0.0, "tools": 0.0, "grade": 0.0}, "tool_calls": {}, "steps": []}


async def run_episode(client: teachers.Teacher, record: dict, sample: int, *, max_turns: int,
                      env_config) -> dict:
    """One episode (module doc): its record for episodes/, with its steps as composer.traces records. Never raises
    for what the endpoint or the environment does: an exception ends the episode as an error (`internal`), retried
    by a rerun."""
    result = new_result(record, sample)
    try:
        return await _episode(client, record, sample, result, max_turns=max_turns, env_config=env_config)
    except Exception as e:  # a container that fails to start, an answer of a shape no parser expected, ...
        result["faults"] = {**result["faults"], "internal": 1}
        result["error"] = f"turn {result['turns'] + 1}: internal: {type(e).__name__}: {client.redacted(str(e))}"
        return result


async def _episode(client: teachers.Teacher, record: dict, sample: int, result: dict, *, max_turns: int,
                   env_config) -> dict:
    from composer.env.environment import CodingEnv, to_step_record, tool_schemas

    spec = client.spec
    episode, faults, calls = result["episode"], Counter(), []
    settings = {"temperature": spec.temperature, "max_tokens": spec.max_tokens, "max_turns": max_turns,
                "provider": spec.provider}
    env = CodingEnv(config=env_config)
    try:
        started = time.perf_counter()
        obs = await asyncio.to_thread(env.reset, instance=record, episode_id=episode)
        result["seconds"]["start"] = time.perf_counter() - started
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": obs.text}]
        tools = tool_schemas()
        while not obs.done and result["turns"] < max_turns:
            stored, sent = await ask(client, messages, tools, turn_key(spec, settings, episode, calls), sample)
            if stored is None:
                faults[sent.error_kind] += 1
                result["unsettled_usd"] += sent.unsettled_usd
                result["error"] = f"turn {result['turns'] + 1}: {sent.error_kind}: {sent.error}"
                break
            faults["retried"] += sent.attempts - 1 if sent else 0
            result["answers_from_store"] += sent is None
            for k in ("prompt_tokens", "completion_tokens", "cached_tokens", "usd", "unsettled_usd"):
                result[k] += stored[k]
            result["simulated"] |= stored["simulated"]
            result["seconds"]["generate"] += stored["latency_s"]
            result["turns"] += 1
            reply = json.loads(stored["message"])
            action, malformed, assistant, answer = act(reply, result["turns"])
            calls.append(None if malformed else [action.tool, action.args])
            result["malformed"] += malformed is not None
            before = [dict(m) for m in messages]
            started = time.perf_counter()
            obs = await asyncio.to_thread(env.step, action)
            spent = time.perf_counter() - started
            result["seconds"]["grade" if action.tool == "submit" else "tools"] += spent
            if action.tool != "submit" and not malformed:  # a malformed turn runs no tool: not a tool's time
                counted = result["tool_calls"].setdefault(action.tool, {"calls": 0, "s": 0.0})
                counted["calls"] += 1
                counted["s"] += spent
            answer["content"] = f"error: {malformed}; call exactly one tool\n{obs.text}" if malformed else obs.text
            messages += [assistant, answer]
            outcome = None
            if obs.done or result["turns"] >= max_turns:
                outcome = {"resolved": obs.reward == 1.0, "reward": obs.reward, "submitted": env.state.submitted,
                           "patch": env.diff()}
            step = to_step_record(obs, action, before, trace_id=episode, outcome=outcome, source="pilot")
            content = reply.get("content") or ""
            if malformed:  # no action the student can take: the reply's text, as it came
                step.action.tool_call, step.action.text = None, content
            elif content:
                step.action.text = f"{content}\n{step.action.text}"
            step.meta.update(model=stored["model_used"], provider=stored["provider"], usd=stored["usd"],
                             usage={"prompt_tokens": stored["prompt_tokens"],
                                    "completion_tokens": stored["completion_tokens"]})
            result["steps"].append(step.model_dump(mode="json"))
        result["faults"] = {k: v for k, v in faults.items() if v}
        if result["error"] is None:
            result["submitted"] = env.state.submitted
            result["truncated"] = not result["submitted"]
            result["reward"] = 1.0 if env.state.reward == 1.0 else 0.0
            if not result["steps"][-1]["done"]:  # the turn limit came before the environment's step limit
                result["steps"][-1].update(done=True, truncated=True, reward=0.0,
                                           outcome={"resolved": False, "reward": 0.0, "submitted": False})
        return result
    finally:
        await asyncio.to_thread(env.close)


async def run(spec: teachers.TeacherSpec, records: list[dict], out_dir, *, samples: int, budget_usd: float,
              max_turns: int = 30, concurrency: int = 2, env_config=None, pool: str = "", seed: int = 0) -> dict:
    """Run every (record, sample) episode not already complete in out_dir, `concurrency` at a time, then write and
    return the summary (module doc). A refused budget stops new episodes; what finished is kept."""
    from composer.env.environment import EnvConfig
    from composer.progress import bar

    out = Path(out_dir)
    (out / EPISODES_DIR).mkdir(parents=True, exist_ok=True)
    claim(out, spec)
    # A frozen student is under no pressure to forge, so real instances whose tests pytest does not run (graded by
    # the tampering scan alone, which 004 refuses) and those without held-out probes (which 004 drops) are graded
    # here, and the summary counts the first
    env_config = env_config or EnvConfig(max_steps=max_turns, grade_scan_only=True, grade_without_probes=True)
    store = teachers.Store(out / STORE_FILE, cap_usd=budget_usd)
    started = time.time()
    todo = [(r, s) for r in records for s in range(samples)
            if not episode_file(out, f"{r['instance_id']}#{s}").exists()]
    stop: list[str] = []
    slots = asyncio.Semaphore(concurrency)
    client = teachers.Teacher(spec, store, slots=asyncio.Semaphore(concurrency), prices=student_prices(spec))
    try:
        with bar(total=len(todo), desc=f"pilot {spec.model}", unit="episode") as progress:
            async def one(record, sample):
                async with slots:
                    if stop:
                        return
                    result = await run_episode(client, record, sample, max_turns=max_turns, env_config=env_config)
                    for kind in set(result["faults"]) & set(STOPS):
                        stop.append(f"stopped by {STOPS[kind]}" + (f" (${budget_usd:g})" if kind == "budget" else ""))
                    if result["error"] is None:
                        files.write_atomic(episode_file(out, result["episode"]), json.dumps(result), sync=True)
                    else:
                        files.write_atomic(episode_file(out, result["episode"]).with_suffix(".error"),
                                           json.dumps(result))
                    progress.update()

            await asyncio.gather(*(one(r, s) for r, s in todo))
        summary = summarize(out, records, samples, spec=spec, ledger=store.totals(), pool=pool, seed=seed,
                            started=started, stop=stop, max_turns=max_turns)
    finally:
        await client.close()
        store.close()
    return summary


def read_episodes(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((Path(out) / EPISODES_DIR).glob("*.json"))]


def summarize(out: Path, records: list[dict], samples: int, *, spec, ledger: dict, pool: str, seed: int,
              started: float, stop: list[str], max_turns: int) -> dict:
    """Write traces.jsonl and pilot.json from the completed episodes of `records` in out (module doc)."""
    from composer import report, traces

    wanted = {r["instance_id"] for r in records}
    episodes = [e for e in read_episodes(out) if e["instance_id"] in wanted and e["sample"] < samples]
    episodes.sort(key=lambda e: (e["instance_id"], e["sample"]))
    errors = [e for p in sorted((out / EPISODES_DIR).glob("*.error")) if not p.with_suffix(".json").exists()
              and (e := json.loads(p.read_text()))["instance_id"] in wanted and e["sample"] < samples]
    lines = [json.dumps(step, ensure_ascii=False) for e in episodes for step in e["steps"]]
    for line in lines:  # the schema every reader of traces.jsonl relies on
        traces.StepRecord.model_validate_json(line)
    files.write_atomic(out / TRACES_FILE, "".join(line + "\n" for line in lines))
    by_task: dict[str, list[float]] = {}
    for e in episodes:
        by_task.setdefault(e["instance_id"], []).append(e["reward"])
    from composer.env.real import container, swebench

    scan_only = {r["instance_id"] for r in records if swebench.is_real(r) and container.scan_only(r)}
    # within reach: a file 004 can take as its test tasks, so none that it refuses (graded by the scan alone)
    reach = within_reach({t: r for t, r in by_task.items() if t not in scan_only}, samples)
    files.write_atomic(out / WITHIN_REACH_FILE, "".join(json.dumps(r) + "\n" for r in records
                                                        if r["instance_id"] in set(reach["task_ids"])))
    summary = {"schema": SCHEMA, "backend": "offline" if _offline(spec, episodes) else "live",
               "student": spec.model_dump(exclude={"mode", "k", "structured_output", "cache_control",
                                                   "expected_output_tokens"}),
               "pool": pool, "tasks": sorted(wanted), "samples": samples, "max_turns": max_turns,
               "episodes": {"planned": len(records) * samples, "complete": len(episodes),
                            "errored": len(errors), "errors": [e["error"] for e in errors[:10]]},
               "complete": len(episodes) == len(records) * samples, "stop_reason": stop[0] if stop else None,
               **measures(by_task, samples), "within_reach": reach, **per_episode(episodes),
               "graded_by_scan_alone": {"tasks": len(scan_only), "what": "real tasks whose tests pytest does not run "
                                        "(django, sympy, sphinx): graded by the tampering scan alone, which a frozen "
                                        "student does not try to forge; 004 refuses them, so within_reach leaves "
                                        "them out"},
               "faults": dict(sum((Counter(e["faults"]) for e in [*episodes, *errors]), Counter())),
               "ledger": ledger, "traces": TRACES_FILE,
               "provenance": report.provenance(seed, started)}
    files.write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def _offline(spec, episodes) -> bool:
    """Offline: a loopback endpoint or a simulated answer (composer serve); its dollars are the student's price of
    a tiny model's tokens and its seconds a CPU's, not measurements of the live student."""
    return urlsplit(spec.base_url).hostname in teachers.LOOPBACK or any(e["simulated"] for e in episodes)


def measures(by_task: dict[str, list[float]], samples: int) -> dict:
    """pass@1 (clustered Wilson), pass@k at `samples` (Wilson over tasks solved at least once among complete
    groups), discordance and the task spread of the base rate, from each task's 0/1 rewards."""
    if not by_task:
        return {"pass_at_1": None, "pass_at_k": None, "discordance": None, "task_spread": None}
    successes = [int(sum(r)) for r in by_task.values()]
    runs = [len(r) for r in by_task.values()]
    p1 = stats.clustered_wilson_interval(successes, runs)
    full = [c for c, n in zip(successes, runs) if n == samples]
    pk = stats.wilson_interval(sum(c > 0 for c in full), len(full)) if full else None
    multi = [(c, n) for c, n in zip(successes, runs) if n > 1]
    # Two runs of one task disagree with probability 2 p (1 - p); 2 c (n - c) / (n (n - 1)) is its unbiased estimate.
    discordance = sum(2 * c * (n - c) / (n * (n - 1)) for c, n in multi) / len(multi) if multi else None
    spread = None
    if len(multi) > 1:
        rates = [c / n for c, n in multi]
        mean = sum(rates) / len(rates)
        between = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
        noise = sum(c * (n - c) / (n * n * (n - 1)) for c, n in multi) / len(multi)  # E[p(1-p)/n], unbiased
        spread = math.sqrt(max(0.0, between - noise))
    return {"pass_at_1": {**p1.as_dict(), "tasks": len(by_task), "tasks_solved": sum(c > 0 for c in successes)},
            "pass_at_k": None if pk is None else {"k": samples, **pk.as_dict()},
            "discordance": None if discordance is None else {
                "estimate": discordance, "tasks": len(multi),
                "what": "the share of tasks on which two runs of the student disagree (power.py's discordance)"},
            "task_spread": None if spread is None else {
                "sd": spread, "tasks": len(multi),
                "what": "SD across tasks of the true per-task pass rate (binomial noise removed)"}}


def within_reach(by_task: dict[str, list[float]], samples: int) -> dict:
    """The tasks within the student's reach: solved at least once in all `samples` runs (pass@k > 0; a task with
    runs missing is left out), and the pass@1 over them. That pass@1 comes from the runs that chose the tasks, so it
    is optimistic: a fresh evaluation of the same tasks expects less (a task solved once by luck counts)."""
    full = {t: r for t, r in by_task.items() if len(r) == samples}
    chosen = sorted(t for t, r in full.items() if any(x == 1.0 for x in r))
    solved = sum(sum(x == 1.0 for x in full[t]) for t in chosen)
    return {"task_ids": chosen, "tasks": len(chosen), "of": len(full), "samples": samples, "file": WITHIN_REACH_FILE,
            "pass_at_1": solved / (len(chosen) * samples) if chosen else None,
            "what": f"tasks solved at least once in {samples} runs; their pass@1 is from the runs that chose them "
                    "(optimistic)"}


def reach_scope(source) -> str | None:
    """In words, when `source` (an A/B's test tasks) is a pilot's within-reach file beside its summary: which tasks
    these are, so a verdict on them says it speaks for them alone; else None."""
    path = Path(source)
    if path.name != WITHIN_REACH_FILE or not (path.parent / SUMMARY_FILE).is_file():
        return None
    summary = read(path.parent)
    reach = summary.get("within_reach") or {}
    pool = f"{summary['pool']} " if summary.get("pool") else ""
    return (f"within the student's reach ({reach.get('tasks')} of {reach.get('of')} {pool}tasks that "
            f"{summary['student']['model']} solved at least once in {reach.get('samples')} runs of the pilot at "
            f"{path.parent}): the verdict speaks for these tasks only")


def per_episode(episodes: list[dict]) -> dict:
    """Means over episodes (turns, tokens, dollars), malformed turns, and seconds per unit of work by phase (the
    keys of composer.costs.phases.per_unit, which plan --from-pilot reads)."""
    if not episodes:
        return {"per_episode": None, "phases": None, "malformed_turns": 0}
    n = len(episodes)
    turns = sum(e["turns"] for e in episodes)
    tool_calls = Counter()
    tool_s = Counter()
    for e in episodes:
        for name, t in e["tool_calls"].items():
            tool_calls[name] += t["calls"]
            tool_s[name] += t["s"]
    submissions = sum(e["submitted"] for e in episodes)
    calls = sum(tool_calls.values())

    def total(key):
        return sum(e["seconds"][key] for e in episodes)

    return {"per_episode": {k: sum(e[k] for e in episodes) / n for k in
                            ("turns", "prompt_tokens", "completion_tokens", "cached_tokens", "usd")},
            "phases": {"generate_s_per_turn": total("generate") / turns if turns else None,
                       "tool_s_per_call": sum(tool_s.values()) / calls if calls else None,
                       "tool_s_by_name": {k: {"calls": tool_calls[k], "s_per_call": tool_s[k] / tool_calls[k]}
                                          for k in sorted(tool_calls)},
                       "grade_s_per_submission": total("grade") / submissions if submissions else None,
                       "start_s_per_episode": total("start") / n, "turns_per_episode": turns / n},
            "malformed_turns": sum(e["malformed"] for e in episodes),
            "submitted": submissions, "answers_from_store": sum(e["answers_from_store"] for e in episodes)}


def read(path) -> dict:
    """A pilot's summary: PATH/pilot.json or the file itself; PilotError naming the fix when it is not one."""
    path = Path(path)
    file = path / SUMMARY_FILE if path.is_dir() else path
    try:
        summary = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise PilotError(f"{file}: not a pilot summary ({e}); run `python -m composer pilot ... --out DIR` "
                         "first") from e
    if not isinstance(summary, dict) or summary.get("schema") != SCHEMA:
        raise PilotError(f"{file}: not a pilot summary of schema {SCHEMA}")
    return summary


# ---------------------------------------------------------------------------------------------------------
# The command


def _live_group_size() -> int:
    import yaml

    return int(yaml.safe_load(LIVE_004.read_text())["generations"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer pilot", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="exit status: 0 done, 1 incomplete (errored episodes: rerun the same "
                                            "command to resume; stopped by the budget cap: rerun with a higher "
                                            "--budget-usd, since the cap counts every run into --out), 2 bad input "
                                            "(nothing sent)")
    parser.add_argument("--student", required=True, help="the model as the endpoint names it (qwen/qwen3-8b)")
    parser.add_argument("--pool", default="verified", help=f"{', '.join([*POOLS, EMBEDDED])}; each but {EMBEDDED} "
                        f"also with {PYTEST}, its tasks whose tests pytest runs (default verified)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes in all: tasks x samples, tasks rounded "
                        "up (default 50)")
    parser.add_argument("--samples", type=int, default=None, help="runs per task (default: 004's GRPO group size, "
                        "`generations` in params/live/004)")
    parser.add_argument("--instances", help="the pool's full records (.json/.jsonl/.parquet or a Hugging Face "
                        "name); default: the pool's dataset on Hugging Face")
    parser.add_argument("--base-url", default=teachers.OPENROUTER, help="an OpenAI-compatible API (default "
                        "OpenRouter; `vllm serve` or `python -m composer serve` on a checkpoint)")
    parser.add_argument("--api-key-env", default=None, help="the NAME of the variable that holds the key (default: "
                        f"OPENROUTER_API_KEY for OpenRouter, {STUDENT_KEY_ENV} for another endpoint; loopback "
                        "endpoints need none)")
    parser.add_argument("--provider", action="append", default=[], help="OpenRouter provider to pin, fallbacks "
                        "off (repeatable)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=4096, help="completion tokens a turn")
    parser.add_argument("--max-turns", type=int, default=30, help="turns an episode (004's env_max_steps: 30)")
    parser.add_argument("--budget-usd", type=float, default=20.0, help="hard cap, worst case of calls in flight "
                        "included (default 20)")
    parser.add_argument("--concurrency", type=int, default=None, help="episodes at once (default: half the CPUs "
                        "for real instances, whose containers grade; 2 for embedded tasks)")
    parser.add_argument("--out", default="runs/pilot", help="run folder; rerun into it to resume (default "
                        "runs/pilot)")
    parser.add_argument("--seed", type=int, default=0, help="which tasks are drawn")
    parser.add_argument("--dry-run", action="store_true", help="price it: nothing sent, no key or download")
    args = parser.parse_args(argv)
    try:
        for name in ("episodes", "max_turns", "max_tokens"):
            if getattr(args, name) < 1:
                raise PilotError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
        if not args.budget_usd > 0:
            raise PilotError(f"--budget-usd must be > 0, got {args.budget_usd:g}")
        samples = args.samples if args.samples is not None else _live_group_size()
        if samples < 1:
            raise PilotError(f"--samples must be >= 1, got {samples}")
        spec = student_spec(args.student, base_url=args.base_url, api_key_env=args.api_key_env,
                            provider=args.provider, temperature=args.temperature, max_tokens=args.max_tokens)
        tasks = math.ceil(args.episodes / samples)
        ids = (pool_ids(args.pool) if args.pool != EMBEDDED else [f"embedded-{i}" for i in range(tasks)])
        chosen = choose(ids, tasks, args.seed)
        if args.dry_run:
            return _dry_run(spec, args, chosen, samples)
        records = records_for(args.pool, chosen, args.instances, seed=args.seed)
        for note in preflight(spec, records):
            print(f"note: {note}", file=sys.stderr)
        claim(Path(args.out), spec)
    except (PilotError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    real = args.pool != EMBEDDED
    concurrency = args.concurrency or (max(1, (os.cpu_count() or 2) // 2) if real else 2)
    summary = asyncio.run(run(spec, records, args.out, samples=samples, budget_usd=args.budget_usd,
                              max_turns=args.max_turns, concurrency=concurrency, pool=args.pool, seed=args.seed))
    print(describe(summary, args.out))
    print(json.dumps({k: summary[k] for k in ("backend", "pool", "samples", "episodes", "complete", "stop_reason",
                                              "pass_at_1", "pass_at_k", "discordance", "task_spread",
                                              "within_reach", "per_episode", "phases", "faults")}))
    return 0 if summary["complete"] else 1


def _dry_run(spec, args, chosen, samples) -> int:
    p = price(spec, tasks=len(chosen), samples=samples, max_turns=args.max_turns, real=args.pool != EMBEDDED)
    cap = "within" if p["usd"]["longest"] <= args.budget_usd else "ABOVE"
    print(f"dry run, nothing sent: {spec.model} on {len(chosen)} {args.pool} tasks x {samples} samples = "
          f"{p['episodes']} episodes")
    print(f"  dollars: ${p['usd']['mean']:.2f} at the mean episode, ${p['usd']['longest']:.2f} if every episode is "
          f"as long as the longest ({cap} the ${args.budget_usd:g} cap); ${p['prices_per_million']['input']:g} / "
          f"${p['prices_per_million']['output']:g} per million input / output tokens ({p['price_source']})")
    if p["usd_per_episode"]["longest"] > 0:
        print(f"  the ${args.budget_usd:g} cap buys about {int(args.budget_usd // p['usd_per_episode']['longest']):,} "
              f"episodes as long as the longest ({int(args.budget_usd // p['usd_per_episode']['mean']):,} at the "
              "mean): more tasks narrow the base rate's interval more than more samples of the same tasks")
    if p["container_hours"] is not None:
        print(f"  containers: {p['container_hours']:.1f} container-hours ({p['container_s_per_episode']:.0f} s an "
              "episode); the instance images must be on this machine (scripts/swebench-image/ or podman pull)")
    print(f"  assumed: {p['assumptions']}; tokens from {p['workload']['episodes']} real episodes "
          f"({p['workload']['source']})")
    print(json.dumps({"dry_run": True, "pool": args.pool, "task_ids": chosen, **p}))
    return 0


def describe(summary: dict, out) -> str:
    """The summary in a few lines, as the command prints it."""
    e, p1, pk = summary["episodes"], summary["pass_at_1"], summary["pass_at_k"]
    lines = [f"pilot ({summary['backend']}): {summary['student']['model']} on {len(summary['tasks'])} "
             f"{summary['pool']} tasks x {summary['samples']}: {e['complete']} of {e['planned']} episodes complete"
             + (f", {e['errored']} errored (rerun to retry)" if e["errored"] else "")
             + (f"; stopped: {summary['stop_reason']}" if summary["stop_reason"] else "")]
    if p1:
        lines.append(f"  pass@1 {p1['estimate']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}] ({p1['method']}; "
                     f"{p1['tasks_solved']} of {p1['tasks']} tasks solved at least once)")
    if pk:
        lines.append(f"  pass@{pk['k']} {pk['estimate']:.3f} [{pk['low']:.3f}, {pk['high']:.3f}] (wilson over "
                     f"{pk['n']} tasks)")
    reach = summary.get("within_reach")
    if reach and reach["tasks"]:
        lines.append(f"  within reach: {reach['tasks']} of {reach['of']} tasks solved at least once, pass@1 "
                     f"{reach['pass_at_1']:.3f} on them (optimistic: the same runs chose them); their records: "
                     f"{Path(out) / WITHIN_REACH_FILE} (004's test_tasks for an A/B on them)")
    if summary["per_episode"]:
        pe = summary["per_episode"]
        what = "a tiny model's tokens at the student's price, not a measurement" if summary["backend"] == "offline" \
            else "measured"
        lines.append(f"  an episode: {pe['turns']:.1f} turns, {pe['prompt_tokens']:,.0f} prompt + "
                     f"{pe['completion_tokens']:,.0f} completion tokens, ${pe['usd']:.4f} ({what})")
    led = summary["ledger"]
    lines.append(f"  spent ${led['committed_usd']:.4f} of the ${led['cap_usd']:g} cap; traces: "
                 f"{Path(out) / TRACES_FILE}; summary: {Path(out) / SUMMARY_FILE}")
    return "\n".join(lines)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
