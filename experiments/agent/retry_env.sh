#!/bin/sh
# The retry environment of retry_env.py in shell (rlpipe-env(5)), with jq:
# the last number of the assistant's turn against the prompt's answer; a
# wrong one gets "That is not right. Try again." until the final request.
while IFS= read -r req; do
    printf '%s\n' "$req" | jq -c '
        (.messages[-1].content | [scan("-?[0-9][0-9,]*")] | last // "" | gsub(","; "")) as $n
        | ($n == .prompt.answer) as $right
        | if $right or (.final // false) then
              {id, done: true, reward: (if $right then 1.0 else 0.0 end),
               info: {first: (if $right and .turn == 1 then 1 else 0 end), turns: .turn}}
          else
              {id, messages: [{role: "user", content: "That is not right. Try again."}]}
          end' || exit 1
done
