"""Canonical actions: a next action, whoever proposes it (a teacher's answer, the student's tool call), as one string
that compares equal when the action is the same, and parsing teachers' answers into distributions over them.

    from composer import actions
    actions.canonical_command("ls  -la ./src/")           # "ls -la src"
    actions.canonical_tool_call("view", {"path": "a.py"})  # the student's call, the same way
    actions.parse_topk(answer_text, k=3)                   # {action: probability} from a top-k answer
    actions.parse_topk_calls(answer_text, k=3)             # the same over tool calls (CodingEnv's tools)
"""

import json
import math
import re
import shlex

HEREDOC = re.compile(r"(?<!<)<<(?!<)(?P<dash>-?)\s*(?P<quote>['\"]?)(?P<delim>[A-Za-z_][A-Za-z0-9_]*)(?P=quote)")
SHELL_OPERATORS = "();<>|&"
FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL)
BASH_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)


class ParseError(ValueError):
    """A teacher's answer that holds no usable distribution; str() says why."""


def canonical_command(command: str) -> str:
    """One spelling per bash command, so that answers of different teachers (and the student's action) compare.

    The shell text is split into words and operators with shlex (POSIX rules, operators `();<>|&` split off
    even without spaces) and re-joined with single spaces, each word re-quoted by shlex.quote: whitespace, quote
    style and escaping no longer matter (`grep -n "a b"  f|head` == `grep -n 'a b' f | head`). A newline between
    commands becomes `;`, after an operator it is a continuation; backslash-newline is dropped. Heredoc bodies
    are data (often code, where indentation matters) and are kept verbatim. Text shlex cannot split (an open
    quote) only has its whitespace runs collapsed.

    The result is an equivalence key, not a command to run: quoting is normalized without regard to expansion,
    so `echo $HOME` and `echo '$HOME'` share a key, as do `echo |` and `echo '|'`; agents rarely differ only so.
    """
    lines = command.strip().split("\n")
    parts, segment, i = [], [], 0
    while i < len(lines):
        segment.append(lines[i])
        match = HEREDOC.search(lines[i])
        i += 1
        if match:
            parts.append(_canonical_shell("\n".join(segment)))
            segment = []
            delim, tabs = match["delim"], bool(match["dash"])
            while i < len(lines):
                parts.append(lines[i])
                i += 1
                if (parts[-1].lstrip("\t") if tabs else parts[-1]) == delim:
                    break
    if segment:
        parts.append(_canonical_shell("\n".join(segment)))
    return "\n".join(parts).strip()


def _canonical_shell(text: str) -> str:
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=SHELL_OPERATORS + "\n")
    lexer.whitespace = " \t\r"  # a newline separates commands: an operator here, not whitespace
    lexer.whitespace_split = True
    lexer.commenters = ""  # '#' stays a character: `a#b` is a word, and comments are part of what the agent ran
    try:
        tokens = list(lexer)
    except ValueError:
        return " ".join(text.split())
    out = []
    for token in tokens:
        if token and all(c in SHELL_OPERATORS + "\n" for c in token):
            operator = token.replace("\n", "") or ";"
            if operator == ";" and (not out or out[-1] in (";", "&&", "||", "|", "&")):
                continue  # a blank line, or a newline continuing an operator
            if out and out[-1].isdigit() and operator[0] in "<>" and re.search(rf"(?<![\w.$]){out[-1]}[<>]", text):
                out[-1] += operator  # a file descriptor (2>/dev/null): `2 >` would redirect stdout
            else:
                out.append(operator)
        else:
            out.append(shlex.quote(token))
    while out and out[-1] == ";":
        out.pop()
    return " ".join(out)


def canonical_tool_call(name: str, arguments: dict) -> str:
    """A bash tool call is its canonical command; any other tool is name(sorted compact JSON arguments)."""
    if name == "bash" and list(arguments) == ["command"] and isinstance(arguments["command"], str):
        return canonical_command(arguments["command"])
    return f"{name}({json.dumps(arguments, sort_keys=True, separators=(',', ':'), ensure_ascii=False)})"


def canonical_action(action) -> str | None:
    """A trace Action's canonical form; None when it made no tool call (a format error the scaffold rejected)."""
    if action.tool_call is None:
        return None
    return canonical_tool_call(action.tool_call.name, action.tool_call.arguments)


def parse_topk(text: str, k: int) -> dict[str, float]:
    """A verbalized top-k answer -> {canonical command: probability}, renormalized to sum to 1.

    Accepted: the JSON object alone, or inside a ``` fence, or with prose around it (the outermost braces are
    read). Candidates beyond k keep the k most probable; duplicates after canonicalization add up.
    """
    pairs = []
    for i, c in enumerate(_candidates(text)):
        command = c.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ParseError(f"candidate {i}: \"command\" is not a non-empty string")
        pairs.append((canonical_command(command), _probability(c, i)))
    return _normalized(pairs, k)


def parse_topk_calls(text: str, k: int) -> dict[str, float]:
    """A verbalized top-k answer over tool calls -> {canonical tool call: probability}, as parse_topk: each
    candidate names its "tool" and gives its "arguments" as a JSON object (or that object encoded as a string)."""
    return _normalized([(_call(c, f"candidate {i}"), _probability(c, i)) for i, c in enumerate(_candidates(text))], k)


def parse_call(text: str) -> str:
    """The canonical tool call of an answer holding one JSON object with "tool" and "arguments"."""
    return _call(_json_object(text), "the answer")


def _json_object(text: str):
    fenced = FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ParseError("no JSON object in the answer")
    try:
        return json.loads(body[start:end + 1])
    except ValueError as e:
        raise ParseError(f"invalid JSON: {e}") from None


def _candidates(text: str) -> list[dict]:
    answer = _json_object(text)
    candidates = answer.get("candidates") if isinstance(answer, dict) else None
    if not isinstance(candidates, list) or not candidates:
        raise ParseError("no non-empty \"candidates\" list")
    for i, c in enumerate(candidates):
        if not isinstance(c, dict):
            raise ParseError(f"candidate {i} is not an object (with \"command\" or \"tool\", and \"probability\")")
    return candidates


def _probability(candidate: dict, i: int) -> float:
    p = candidate.get("probability")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
        raise ParseError(f"candidate {i}: \"probability\" is not a finite number >= 0 (got {p!r})")
    return float(p)


def _call(candidate, where: str) -> str:
    tool = candidate.get("tool") if isinstance(candidate, dict) else None
    arguments = candidate.get("arguments", {}) if isinstance(candidate, dict) else None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise ParseError(f"{where}: \"arguments\" is not JSON") from None
    if not isinstance(tool, str) or not tool.strip() or not isinstance(arguments, dict):
        raise ParseError(f"{where}: needs \"tool\" (a name) and \"arguments\" (an object)")
    return canonical_tool_call(tool.strip(), arguments)


def _normalized(pairs: list[tuple[str, float]], k: int) -> dict[str, float]:
    pairs = sorted(pairs, key=lambda pair: -pair[1])[:k]
    total = sum(p for _, p in pairs)
    if total <= 0:
        raise ParseError("the probabilities add up to 0")
    distribution = {}
    for action, p in pairs:
        distribution[action] = distribution.get(action, 0.0) + p / total
    return distribution


def parse_command(text: str) -> str:
    """The canonical command of an answer holding exactly one ```bash block (the agent's own format rule)."""
    blocks = BASH_BLOCK.findall(text)
    if len(blocks) != 1:
        raise ParseError(f"expected exactly one ```bash block, found {len(blocks)}")
    command = canonical_command(blocks[0])
    if not command:
        raise ParseError("the bash block is empty")
    return command
