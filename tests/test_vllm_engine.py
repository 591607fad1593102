"""composer.vllm_engine: evaluation rollouts generated through vLLM's interface.

    .venv/bin/pytest -q tests/test_vllm_engine.py

These tests put a stand-in `vllm` module in vLLM's place, so they run where vLLM is not installed and check what a
real engine does not show: an `LLM` with vLLM's generate signature that continues each token prompt greedily with
transformers' own `generate`, and a `SamplingParams` that keeps its arguments. They check the glue: the prompts vLLM
gets, its stop token, budget and per-turn seeds, the batch it is handed, and how each process of a launch builds
its engine. The real engine on CPU: tests/test_vllm_cpu.py.
"""

import dataclasses
import os
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from composer import policies, vllm_engine
from composer.ab import preparation, training
from test_ab_training import _parameters
from composer.env.defences import probes
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig
from composer.models import load_model, load_tokenizer, tiny_model


class FakeLLM:
    built = []

    def __init__(self, model, **kwargs):
        self.kwargs = {"model": model, **kwargs}
        self.hf = load_model(model)
        self.calls = []
        FakeLLM.built.append(self)

    def generate(self, prompts, *, sampling_params, use_tqdm):
        assert len(prompts) == len(sampling_params) and use_tqdm is False
        self.calls.append((prompts, sampling_params))
        outputs = []
        for prompt, params in zip(prompts, sampling_params):
            assert params.temperature == 0.0  # the stand-in is greedy only
            ids = torch.tensor([prompt["prompt_token_ids"]])
            out = self.hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                   max_new_tokens=params.max_tokens, eos_token_id=params.stop_token_ids,
                                   pad_token_id=params.stop_token_ids[0])
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(out[0, ids.shape[1]:].tolist()))]))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = ModuleType("vllm")
    module.LLM, module.SamplingParams = FakeLLM, lambda **kwargs: SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)  # the stand-in has no platform: the GPU path's build
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")  # recorded, so the engine's settings are undone after the test
        monkeypatch.delenv(name)
    FakeLLM.built.clear()
    return FakeLLM


def test_vllm_gets_the_rendered_conversation_its_stop_token_budget_and_a_seed_per_turn(fake_vllm):
    """The glue, turn by turn (that the real engine then generates the transformers loop's tokens is
    tests/test_vllm_cpu.py's)."""
    path = tiny_model("policy-test")
    records, _ = probes.rewarded(3, seed=0, split="test")  # reset refuses a task without held-out probes
    settings = dict(k=1, env_config=EnvConfig(max_steps=2, max_observation_chars=400), max_new_tokens=6,
                    return_rollouts=True)
    through_vllm = policies.evaluate(path, records, engine="vllm", batch_size=2, **settings)

    (llm,) = fake_vllm.built
    assert llm.kwargs == {"model": str(path), "distributed_executor_backend": "external_launcher", "seed": 0,
                          "dtype": "float32"}  # the checkpoint's own
    assert [len(prompts) for prompts, _ in llm.calls] == [2, 2, 1, 1]  # 2 episodes in lockstep, 2 turns each
    tok = load_tokenizer(path)
    runs = through_vllm[1]
    # the rendered conversation as token ids: each episode's task first, then its task and first turn
    assert [p["prompt_token_ids"] for p in llm.calls[0][0]] == [policies._prompt_ids(tok, r[1][:2]) for r in runs[:2]]
    assert [p["prompt_token_ids"] for p in llm.calls[1][0]] == [policies._prompt_ids(tok, r[1][:4]) for r in runs[:2]]
    params = [p for _, ps in llm.calls for p in ps]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert all(p.stop_token_ids == [eos] and p.max_tokens == 6 and p.temperature == 0.0 for p in params)
    assert len({p.seed for p in params}) == len(params)  # every episode's every turn its own sampling seed


def test_vllm_gets_every_episode_of_the_shard_in_one_batch(fake_vllm):
    """vLLM schedules its own batches, so by default evaluate hands it all the episodes at once (transformers: 16)."""
    path = tiny_model("policy-test")
    records, _ = probes.rewarded(40, seed=0, split="test")
    policies.evaluate(path, records, engine="vllm", shard=(0, 2), env_config=EnvConfig(max_steps=1),
                      max_new_tokens=2)
    (llm,) = fake_vllm.built
    assert [len(prompts) for prompts, _ in llm.calls] == [20]


def test_each_process_of_a_launch_builds_its_own_engine(fake_vllm):
    path = tiny_model("policy-test")
    model = vllm_engine.load(path, rank=1, local_rank=0, world=2)
    assert model.llm.kwargs["seed"] == 1 and model.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"]) == ("1", "0", "2")
    assert os.environ["MASTER_ADDR"] and os.environ["MASTER_PORT"]
    assert model.config.max_position_embeddings == load_model(path).config.max_position_embeddings


def test_without_vllm_the_error_names_the_live_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(ImportError, match="make install EXTRAS=live"):
        vllm_engine.load(tiny_model("policy-test"))
    with pytest.raises(ValueError, match=r"engine must be one of \('transformers', 'vllm'\), got 'vlm'"):
        policies.evaluate(tiny_model("policy-test"), tasks.generate(1, seed=0, split="test"), engine="vlm")


def test_grpo_through_vllm_switches_004s_screening_and_evaluations_to_it(tmp_path, monkeypatch):
    """One switch: trainer_config's use_vllm names the engine in the evaluation settings (and so in the evaluation
    jobs' keys); without it the settings and keys are the transformers ones they were."""
    engines = []

    def evaluate(student, tasks, *, n, engine="transformers", **_):  # every task solved in 1 of n rollouts
        engines.append(engine)
        return {}, [(t["instance_id"], [], float(j == 0), {}) for t in tasks for j in range(n)]

    monkeypatch.setattr(policies, "evaluate", evaluate)
    settings = _parameters(arms={"A": {}}, screen_tasks=2, generations=2, steps=1, prompts_per_step=1)
    vllm = dataclasses.replace(settings, trainer_config={"use_vllm": True})
    plan = training.plan_from_parameters(vllm, preparation.prepare(vllm, tmp_path))
    assert plan.evaluation["engine"] == "vllm" and engines == ["vllm"]
    plain = training.plan_from_parameters(settings, preparation.prepare(settings, tmp_path))
    assert "engine" not in plain.evaluation and engines == ["vllm", "transformers"]
    eval_keys = [{j["key"] for j in training.jobs(p) if j["kind"] == "eval"} for p in (plan, plain)]
    assert not eval_keys[0] & eval_keys[1]
    with pytest.raises(ValueError, match="evaluation: engine must be one of"):
        training.Plan(**{**plain.__dict__, "evaluation": {"engine": "sglang"}})
