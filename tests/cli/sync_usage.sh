#!/bin/bash
# rl-sync's help and version, its usage errors (exit 2), the errors that exit 1
# before anything is pushed (SRC missing, nobody listening, --watch on a model
# directory, an unsafe token file), and one push of each conversion to the
# Python receiver of tests/py/pushproto.py under the sanitizers, and one from
# shards as transformers writes them.
# (man/rl-sync.1; doc/design.md §5, §7.)
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}


"$PY" - <<'EOF2' || { fail setup "could not write the model"; finish; }
import llama_ref
llama_ref.random_model("m", hidden=32, inter=48, layers=1, heads=2, kv_heads=1, vocab=64, seed=2)
EOF2
printf 'a-token-of-twenty-bytes\n' >tok
chmod 600 tok

# ---- help and version
expect "--help: exit 0" 0 '' -- rl-sync --help
check "--help: usage on stdout, nothing on stderr" "stdout: $(head -c 200 out); stderr: $(head -c 200 err)" \
    eval 'grep -qE "^Usage: rl-sync " out && [ ! -s err ]'
help_matches_man rl-sync 12
expect "--version: exit 0" 0 '' -- rl-sync --version
check "--version: 'rl-sync (rlpipe) 0.1.0', the libraries, xxhash and OpenSSL" "stdout: $(head -c 300 out)" \
    eval '[ "$(head -n 1 out)" = "rl-sync (rlpipe) 0.1.0" ] && grep -qi zstd out && grep -qi xxhash out && grep -qi openssl out'

# ---- usage errors: exit 2, the reason and the hint
usage() {  # usage NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    expect "$name: usage error" 2 "^rl-sync: error: $pattern" -- rl-sync "$@"
    check "$name: the hint to --help" "stderr: $(head -c 300 err)" \
        grep -qx "Try 'rl-sync --help' for more information." err
}
usage "no SRC" 'give SRC: a checkpoint root or a model directory' --to s.sock
usage "two SRC" "one SRC only, got 'm' and 'n'" m n --to s.sock
usage "no --to" '--to ADDR: at least one receiver is required' m
usage "tcp without --token-file" '--to tcp:...: a tcp receiver needs --token-file FILE' m --to s.sock --to tcp:127.0.0.1:7070
usage "a bad port" '--to: bad port "99999" \(a number from 0 to 65535\): tcp:99999' m --to tcp:99999 --token-file tok
usage "an empty socket path" '--to: empty socket path' m --to unix:
usage "an IPv6 address without brackets" '--to: an IPv6 address needs brackets' m --to tcp:::1:80 --token-file tok
usage "the same receiver twice" '--to unix:s.sock: given twice' m --to s.sock --to unix:s.sock
usage "--max-version without --watch" '--max-version goes with --watch' m --to s.sock --max-version 3
usage "--as-version with --watch" '--as-version names the one version of a push without --watch' --watch m --to s.sock --as-version 3
usage "--timeout 0" "--timeout: 0 is outside" m --to s.sock --timeout 0
usage "--retry -1" "--retry: -1 is outside" m --to s.sock --retry -1
usage "--poll x" "--poll: expected a number, got 'x'" m --to s.sock --poll x
usage "--as-version -1" "--as-version: expected a non-negative integer" m --to s.sock --as-version -1
expect "an unknown option: usage error" 2 "Try 'rl-sync --help' for more information" -- rl-sync --bogus m --to s.sock

# ---- errors before any push: exit 1
expect "a missing SRC: exit 1 naming it" 1 '^rl-sync: error: cannot open the checkpoint: nosuch: No such file or directory$' -- \
    rl-sync nosuch --to s.sock
mkdir empty
expect "a directory without model.safetensors: exit 1 naming the file" 1 '^rl-sync: error: .*empty/model\.safetensors' -- \
    rl-sync empty --to s.sock
expect "nobody listens, --retry 0: exit 1 saying so" 1 \
    "^rl-sync: warning: v000000 not pushed: nobody listens at unix:none\.sock: No such file or directory$" -- \
    rl-sync m --to none.sock --retry 0
check "nobody listens: the summary counts the failure" "stderr: $(head -c 400 err)" \
    grep -qE '^rl-sync: 0 pushes, 1 failed, 0 already held, 0 versions skipped for newer ones, 0 B, ' err
: >not.sock
expect "a file that is not a socket: exit 1" 1 "not pushed: .*not\.sock" -- rl-sync m --to not.sock --retry 0
expect "--watch on a model directory: exit 1" 1 \
    '^rl-sync: error: m is a model directory, not a checkpoint root: --watch follows' -- rl-sync --watch m --to s.sock
cp tok tok.open
chmod 644 tok.open
expect "a token file others may read: exit 1" 1 \
    '^rl-sync: error: token file tok.open is accessible to others \(mode 0644\): chmod 600 tok.open$' -- \
    rl-sync m --to tcp:7070 --token-file tok.open

# ---- pushes (under the sanitizers in the ASan run): f32, bf16, f16 to a Python receiver
"$PY" - >py.out 2>&1 <<'EOF2'
import subprocess, torch, pushproto
from safetensors.torch import load_file
w = load_file("m/model.safetensors")
dts = ["f32", "bf16", "f16"]
want = {k: (tuple(t.shape), dts[i % 3]) for i, (k, t) in enumerate(sorted(w.items()))}
with pushproto.Receiver("tcp:127.0.0.1:0", want, token=b"a-token-of-twenty-bytes") as r:
    p = subprocess.run(["rl-sync", "m", "--as-version", "2", "--to", r.address, "--token-file", "tok"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ex = r.pushes()[0]
tt = {"f32": (torch.float32, torch.int32), "bf16": (torch.bfloat16, torch.int16), "f16": (torch.float16, torch.int16)}
for k, t in w.items():
    dt, bits = tt[want[k][1]]
    assert ex.raw[k] == t.to(dt).view(bits).numpy().tobytes(), k
print("ok", ex.version, len(ex.raw))
EOF2
check "a push to a Python receiver: f32, bf16 and f16 as PyTorch rounds them" "$(tail -c 600 py.out)" \
    grep -qE '^ok 2 [0-9]+$' py.out

# ---- a push from shards (model.safetensors.index.json, as transformers writes them, in bf16)
"$PY" - >py.out 2>&1 <<'EOF2'
import subprocess, torch, pushproto, transformers
m = transformers.AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16)
m.save_pretrained("m-shards", safe_serialization=True, max_shard_size="8KB")
w = {k: v for k, v in m.state_dict().items()}
want = {k: (tuple(t.shape), "f32") for k, t in w.items()}
with pushproto.Receiver("tcp:127.0.0.1:0", want, token=b"a-token-of-twenty-bytes") as r:
    p = subprocess.run(["rl-sync", "m-shards", "--as-version", "3", "--to", r.address, "--token-file", "tok"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ex = r.pushes()[0]
for k, t in w.items():
    assert ex.raw[k] == t.float().numpy().tobytes(), k
print("ok", ex.version, len(ex.raw), sum(f.startswith("model-") for f in __import__("os").listdir("m-shards")))
EOF2
check "a push from a sharded bf16 copy: every tensor from its shard, widened to f32" "$(tail -c 600 py.out)" \
    grep -qE '^ok 3 [0-9]+ ([2-9]|[1-9][0-9]+)$' py.out
finish
