#!/usr/bin/env python3
"""The retry environment (rlpipe-env(5)), standard library only: the answer
is the last number of the assistant's turn; a right one ends the rollout with
reward 1, a wrong one gets "That is not right. Try again." until the final
request (--max-turns), which ends it with reward 0.
info: {"first": 1 if right at the first turn, "turns": turns taken}.
"""
import json
import re
import sys

for line in sys.stdin:
    r = json.loads(line)
    nums = re.findall(r"-?\d[\d,]*", r["messages"][-1]["content"])
    right = bool(nums) and nums[-1].replace(",", "") == r["prompt"]["answer"]
    if right or r.get("final"):
        out = {"id": r["id"], "done": True, "reward": float(right),
               "info": {"first": int(right and r["turn"] == 1), "turns": r["turn"]}}
    else:
        out = {"id": r["id"], "messages": [{"role": "user", "content": "That is not right. Try again."}]}
    print(json.dumps(out), flush=True)
