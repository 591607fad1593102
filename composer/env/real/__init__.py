"""Real SWE-bench instances: records and predictions, a container per episode, grading by the harness's script.

    from composer.env.real import container, swebench
    report = swebench.evaluate(preds, swebench.load_instances("lite.jsonl"), run_id="x")   # embedded or real
    .venv/bin/pytest tests/test_env_swebench.py tests/test_env_container.py   # the latter: podman and an image

Owns swebench (load, validate and evaluate records and predictions: embedded ones in the sandbox, real ones in
their container) and container (an instance's container per episode, its grading with the canaries, probes and
plain values planted, its held-out probes computed once per image).

Imports the floors below it: composer.env.containment, embedded and defences (and composer.files, paths).
"""
