"""Offline stand-ins for frontier teachers: the specs pointed at a local echo server that plays each model's
simulated provider (composer/providers.yaml), so a replay runs the live code path with no key and no spend.

    from composer import replay, stand_ins, teachers
    specs = [teachers.TeacherSpec(**d) for d in teachers.DEFAULT_TEACHERS]
    with stand_ins.offline_teachers(specs, time_scale=0.1) as local:   # the same specs, base_url on 127.0.0.1
        result = await replay.replay(by_trace, local, "runs/001")
"""

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from composer import tether
from composer.models import tokenizer_dir
from composer.providers import load_profiles
from composer.teachers import TeacherSpec

ECHO_CONTEXT = 1_000_000  # frontier teachers take 200k-1M tokens; the tiny tokenizer's 4096 would refuse real traces


@contextlib.contextmanager
def offline_teachers(specs: list[TeacherSpec], *, time_scale: float = 1.0, seed: int = 0, profile: str | None = None):
    """The specs pointed at a local echo server (`python -m composer serve --no-generate`, its own process, as
    a remote provider would be) playing each model's simulated provider profile from composer/providers.yaml
    (latency, prices -> usage.cost, prompt caching, 429/500 faults), or `profile` for every model.

    What that is and is not: every request, retry, timeout, cache breakpoint, ledger row and record goes through
    the same code as live, but no model answers. The echo backend returns the last user message (our question),
    which holds no JSON object and no code block, so every offline answer is an honest parse failure. Latency is
    the profile's (time_scale shrinks every simulated duration and the client timeouts alike, for smoke runs),
    usage.cost is the profile's price of the tiny tokenizer's counts: neither is a measurement of a real teacher.
    """
    available = load_profiles()
    missing = [name for name in ([profile] if profile else [s.model for s in specs]) if name not in available]
    if missing:
        raise ValueError(f"no simulated profile {', '.join(missing)} in composer/providers.yaml")
    served = {}
    for s in specs:
        p = available[profile or s.model].model_copy(deep=True)
        p.latency.ttft_median_s *= time_scale
        p.latency.per_token_s *= time_scale
        p.errors.retry_after_s *= time_scale
        p.errors.stall_s *= time_scale
        served[s.model] = p.model_dump()
    tokenizer = echo_tokenizer_dir()
    with tempfile.TemporaryDirectory() as tmp:
        profiles_file = Path(tmp) / "providers.yaml"
        profiles_file.write_text(yaml.safe_dump(served))
        command = [sys.executable, "-m", "composer", "serve", "--no-generate", "--seed", str(seed),
                   "--profiles", str(profiles_file)]
        for s in specs:
            command += ["--model", f"{s.model}={tokenizer}"]  # a model named like a profile in the file gets it
        # Tied to this process: a killed kernel (ipykernel exits with os._exit when its CLI dies) skips the
        # `finally` below, and the server would outlive the run.
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=tether.tied())
        try:
            line = proc.stdout.readline()  # "serving NAMES at URL"
            if not line:
                raise RuntimeError(f"the local teacher server exited with status {proc.wait()} (see its stderr)")
            base_url = line.split()[-1]
            yield [s.model_copy(update={"base_url": base_url, "timeout_s": s.timeout_s * time_scale}) for s in specs]
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def echo_tokenizer_dir() -> Path:
    """The tiny tokenizer with a context of ECHO_CONTEXT tokens (the echo server refuses longer prompts than the
    tokenizer's model_max_length, 4096, and real traces run to tens of thousands)."""
    source = tokenizer_dir()
    target = source.with_name(f"{source.name}-ctx{ECHO_CONTEXT}")
    if target.exists():
        return target
    tmp = Path(tempfile.mkdtemp(dir=source.parent, prefix=".tmp-"))
    shutil.copytree(source, tmp, dirs_exist_ok=True)
    config = json.loads((tmp / "tokenizer_config.json").read_text())
    config["model_max_length"] = ECHO_CONTEXT
    (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    try:
        tmp.rename(target)  # atomic; if another process published it first, theirs wins
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
