"""Spike 003: DPO pairs from where teachers disagree with the student's own actions, their statistics and the pairs
that do not come from teachers (004's positive control).

- pairs.py            pairs from teacher disagreement, their controls, datasets with reference log-probs
- pair_stats.py       the statistics pairs are judged by
- reference_pairs.py  the scripted expert's pairs (004's positive control), oracle pairs, embedded traces

Imports the shared library and the environment; nothing of costs, collection or ab (tests/test_layout.py checks).
"""
