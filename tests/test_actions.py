"""composer.actions: one canonical form for every spelling of an action, and parsing teachers' answers.

    .venv/bin/pytest tests/test_actions.py
"""


import pytest

from composer import actions
from composer.actions import ParseError, canonical_command, canonical_tool_call, parse_command, parse_topk
from composer.traces import Action, ToolCall


@pytest.mark.parametrize("a, b", [
    ('grep -n  "def f"  x.py|head', "grep -n 'def f' x.py | head"),
    ("cd /repo && python -c \"print('x')\"", "cd /repo   &&   python -c 'print('\"'\"'x'\"'\"')'"),
    ("cd a\nls", "cd a; ls"),
    ("cd a;\n\n  ls\n", "cd a ; ls"),
    ("cat f |\n  head", "cat f | head"),
    ("ls \\\n  -la", "ls -la"),
    ("python t.py 2>&1|tail -5", "python t.py 2>& 1 | tail -5"),
    ("cat <<'EOF' > f.py\ndef f():\n    return 1\nEOF\npython  f.py",
     "cat  <<  'EOF'  >  f.py\ndef f():\n    return 1\nEOF\npython f.py"),
])
def test_canonical_command_merges_spellings_of_one_command(a, b):
    assert canonical_command(a) == canonical_command(b)


@pytest.mark.parametrize("a, b", [
    ("grep 'a b' f", "grep a b f"),  # one argument vs two
    ("ls 2>/dev/null", "ls 2 >/dev/null"),  # stderr vs an argument "2" and stdout
    # heredoc bodies are data: indentation counts
    ("cat <<EOF > f.py\ndef f():\n    return 1\nEOF", "cat <<EOF > f.py\ndef f():\n  return 1\nEOF"),
    ("sed 's#a#b#' f", "sed 's' f"),  # '#' is not a comment inside a word
    ("ls a; ls b", "ls a && ls b"),
])
def test_canonical_command_keeps_different_commands_apart(a, b):
    assert canonical_command(a) != canonical_command(b)


def test_canonical_command_exact_forms():
    assert canonical_command('grep -n  "def f"  x.py|head') == "grep -n 'def f' x.py | head"
    assert canonical_command("find . -name '*.py' 2>/dev/null") == "find . -name '*.py' 2> /dev/null"
    assert canonical_command('echo "unclosed  quote') == 'echo "unclosed quote'  # shlex gives up: whitespace only
    assert canonical_command("  \n ") == ""


def test_canonical_actions_of_tool_calls_and_trace_actions():
    assert canonical_tool_call("bash", {"command": "ls  -la"}) == "ls -la"
    assert canonical_tool_call("edit", {"path": "a.py", "line": 3}) == 'edit({"line":3,"path":"a.py"})'
    bash = Action(text="x", tool_call=ToolCall(name="bash", arguments={"command": "python  t.py"}))
    assert actions.canonical_action(bash) == "python t.py"
    assert actions.canonical_action(Action(text="no tool call")) is None


def test_parse_topk_renormalizes_over_canonical_actions():
    text = ('Here you go:\n```json\n{"candidates": [{"command": "ls  -la", "probability": 0.5}, '
            '{"command": "ls -la", "probability": 0.3}, {"command": "pwd", "probability": 0.4}]}\n```')
    assert parse_topk(text, 5) == pytest.approx({"ls -la": 0.8 / 1.2, "pwd": 0.4 / 1.2})
    assert parse_topk('{"candidates": [{"command": "a", "probability": 60}, {"command": "b", "probability": 40}]}',
                      5) == pytest.approx({"a": 0.6, "b": 0.4})  # percentages: renormalized alike
    # more than k: the k most probable
    assert parse_topk('{"candidates": [{"command": "a", "probability": 0.1}, {"command": "b", "probability": 0.6},'
                      ' {"command": "c", "probability": 0.3}]}', 2) == pytest.approx({"b": 2 / 3, "c": 1 / 3})


@pytest.mark.parametrize("text, reason", [
    ("I would run the tests next.", "no JSON object"),
    ('{"candidates": [{"command": "ls", "probability": 0.5}', "invalid JSON"),  # cut off mid-answer
    ('{"candidates": [{"command": "ls", "probability": 0.5},]}', "invalid JSON"),
    ('{"actions": []}', "candidates"),
    ('{"candidates": []}', "candidates"),
    ('{"candidates": [{"command": "", "probability": 1}]}', "command"),
    ('{"candidates": [{"command": "ls", "probability": "high"}]}', "probability"),
    ('{"candidates": [{"command": "ls", "probability": -0.5}]}', "probability"),
    ('{"candidates": [{"command": "ls", "probability": 0}]}', "add up to 0"),
    ('{"candidates": ["ls"]}', "command"),
])
def test_parse_topk_failures_say_why(text, reason):
    with pytest.raises(ParseError, match=reason):
        parse_topk(text, 5)


def test_parse_command_needs_exactly_one_bash_block():
    assert parse_command("Next:\n```bash\ngrep -rn  foo .\n```") == "grep -rn foo ."
    with pytest.raises(ParseError, match="found 0"):
        parse_command("grep -rn foo .")
    with pytest.raises(ParseError, match="found 2"):
        parse_command("```bash\nls\n```\n```bash\npwd\n```")
