"""Running untrusted code: an agent's edits and a task's tests in a contained, bounded subprocess.

    from composer.env.containment import sandbox
    sandbox.run_pytest(repo, ["tests/test_ops.py::test_mean_1"], timeout_s=20).outcomes   # {id: passed}
    .venv/bin/pytest tests/test_env_sandbox.py tests/test_env_worker.py tests/test_env_forkserver.py

Owns sandbox (containment modes and runs; its docstring holds the threat model), limits (a run's bounds, its uid
and memory cgroup, the variables it sees, SandboxError), patches (paths inside a copy, diffs applied whole or not
at all), forkserver (fresh sandboxes with pytest preloaded), worker (a warm pytest for one episode's runs), and the
two files every sandboxed pytest loads: sandbox_plugin (the outcome plugin) and plain_values (what the plugin loads
when grading: a grading layer, composer/env/defences/README.md, kept here because the sandbox writes it into
each run).

Imports nothing of composer: the bottom floor. Within it limits is lowest, then patches, then sandbox.
"""
