#!/usr/bin/env python3
"""The calculator environment (rlpipe-env(5)), standard library only.

A turn with a call to "calculator" gets the value of its expression (digits,
+ - * / and parentheses; anything else, or a call to another tool, gets an
error message as the tool's result). A turn without a call is the final
answer: reward 1 when its last number is the prompt's "answer", else 0; so
is a final request's turn, whatever it holds. info: {"calls": N, "right": 0|1}.
"""
import ast
import json
import operator
import re
import sys

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expr):
    """The value of an arithmetic expression; ValueError for anything else."""
    def value(n):
        if isinstance(n, ast.Expression):
            return value(n.body)
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            return OPS[type(n.op)](value(n.left), value(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        raise ValueError("only numbers and + - * / ( )")
    if len(expr) > 200:
        raise ValueError("expression too long")
    try:
        v = value(ast.parse(expr, mode="eval"))
    except (SyntaxError, ZeroDivisionError) as e:
        raise ValueError(str(e))
    return str(int(v)) if v == int(v) else str(v)


def last_number(text):
    m = re.findall(r"-?\d[\d,]*", text)
    return m[-1].replace(",", "") if m else None


def answer(r, calls):
    last = r["messages"][-1]
    tool_calls = last.get("tool_calls") or []
    if tool_calls and not r.get("final"):
        f = tool_calls[0]["function"]
        args = f.get("arguments") or {}
        try:
            if f.get("name") != "calculator" or not isinstance(args, dict):
                raise ValueError(f"no tool {f.get('name')!r}: the tool is calculator")
            result = evaluate(str(args.get("expression", "")))
        except ValueError as e:
            result = f"error: {e}"
        return {"id": r["id"], "messages": [{"role": "tool", "content": result}]}
    right = int(not tool_calls and last_number(last["content"]) == r["prompt"]["answer"])
    return {"id": r["id"], "done": True, "reward": float(right), "info": {"calls": calls, "right": right}}


def main():
    calls = {}
    for line in sys.stdin:
        r = json.loads(line)
        if r["messages"][-1].get("tool_calls"):
            calls[r["id"]] = calls.get(r["id"], 0) + 1
        out = answer(r, calls.get(r["id"], 0))
        if out.get("done"):
            calls.pop(r["id"], None)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
