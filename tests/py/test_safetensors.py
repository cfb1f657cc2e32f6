"""lib/checkpoint/safetensors.c and lib/checkpoint/config.c interoperate with Hugging Face.

The reference is Hugging Face's own safetensors library (safetensors.numpy,
safetensors.torch for bfloat16), driven against tests/tools/st_tool
(built by `make aux` into $BUILD/tests/tools/st_tool). Contract: doc/design.md §3.

  - files the reference writes, in F32, F16 and BF16, are read with exact values;
  - files st_tool writes (F32, scalars and empty tensors included) are read by
    the reference with the same names, shapes and bit-exact values;
  - malformed files are refused with exit 1 and a message naming the file,
    the tensor and the problem (and the reference refuses them too);
  - a config.json saved by config.c reads back as the same model.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

import rltest
from rltest import ROOT, case, finish

try:
    import safetensors.numpy as stnp
except ImportError as e:  # scripts/deps.sh test installs it into .deps/venv
    print(f"SKIP test_safetensors: the safetensors Python library is missing ({e}); run scripts/deps.sh test")
    sys.exit(0)
try:
    import torch
    import safetensors.torch as stt
except ImportError:
    torch = None

BUILD = os.environ.get("BUILD", "build")
ST_TOOL = os.path.join(ROOT, BUILD, "tests", "tools", "st_tool")
TMP = rltest.TMP
tmpfile = rltest.tmpfile


def st_tool(*args):
    """Runs st_tool; returns (status, stdout text, stderr text)."""
    assert os.access(ST_TOOL, os.X_OK), f"{ST_TOOL} is not built (make BUILD={BUILD} aux)"
    p = subprocess.run([ST_TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def dump(path):
    """{name: (dtype, shape, float32 array)} as st_tool reads the file."""
    rc, out, err = st_tool("dump", path)
    assert rc == 0, f"st_tool dump {path} exited {rc}: {err.strip()}"
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) % 2 == 1, f"dump output is not pairs of lines: {out[:200]!r}"
    tensors = {}
    for i in range(0, len(lines) - 1, 2):
        name, dtype, shape = lines[i].split(" ")
        values = [float(v) for v in lines[i + 1].split(" ")] if lines[i + 1] else []
        assert name not in tensors, f"{name} dumped twice"
        tensors[name] = (dtype, tuple(json.loads(shape)), np.array(values, dtype=np.float32))
    return tensors


def assert_same_f32(got, want, what):
    """Bit-exact float32 equality; NaN matches any NaN (%.9g does not carry payloads)."""
    got = np.asarray(got, dtype=np.float32).ravel()
    want = np.asarray(want, dtype=np.float32).ravel()
    assert got.shape == want.shape, f"{what}: {got.shape[0]} values, expected {want.shape[0]}"
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaNs at different places"
    bad = np.nonzero(got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan])[0]
    assert bad.size == 0, f"{what}: {bad.size} values differ, first {got[~nan][bad[0]]!r} != {want[~nan][bad[0]]!r}"


def header_of(data):
    n = struct.unpack("<Q", data[:8])[0]
    return n, data[8:8 + n]


def with_header(header, data_area):
    """A safetensors file from a header (dict or text) and the data bytes."""
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data_area


# ---- files written by Hugging Face, read by rlpipe -------------------------

@case
def f32_files_written_by_huggingface_are_read_with_exact_values():
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4028235e38, 1 / 3], dtype=np.float32)
    tensors = {
        "model.embed_tokens.weight": rng.standard_normal((7, 5)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.bias": (rng.standard_normal(5) * 1e-20).astype(np.float32),
        "model.norm.weight": special,
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "eight_dims": rng.standard_normal((1, 2, 1, 1, 3, 1, 1, 2)).astype(np.float32),
    }
    path = os.path.join(TMP.name, "hf_f32.safetensors")
    stnp.save_file(tensors, path, metadata={"format": "np"})
    got = dump(path)
    assert set(got) == set(tensors), f"names {sorted(got)}, expected {sorted(tensors)}"
    for name, want in tensors.items():
        dtype, shape, values = got[name]
        assert dtype == "F32" and shape == want.shape, f"{name}: {dtype} {shape}, expected F32 {want.shape}"
        assert_same_f32(values, want, name)


@case
def every_f16_value_written_by_huggingface_is_read_exactly():
    all_f16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    path = os.path.join(TMP.name, "hf_f16.safetensors")
    stnp.save_file({"all": all_f16, "one": np.array([1.0, -0.5], dtype=np.float16)}, path)
    got = dump(path)
    dtype, shape, values = got["all"]
    assert dtype == "F16" and shape == (256, 256), f"{dtype} {shape}"
    assert_same_f32(values, all_f16.astype(np.float32), "all f16 values")
    assert_same_f32(got["one"][2], [1.0, -0.5], "one")


@case
def every_bf16_value_written_by_huggingface_torch_is_read_exactly():
    if torch is None:
        print("SKIP every_bf16_value_written_by_huggingface_torch_is_read_exactly: torch is missing")
        return
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    all_bf16 = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).reshape(256, 256)
    path = os.path.join(TMP.name, "hf_bf16.safetensors")
    mixed = {
        "all": all_bf16,
        "model.norm.weight": torch.tensor([1.0, 1 / 3, -2.0, 1e-3], dtype=torch.float32),
        "model.layers.0.mlp.down_proj.weight": torch.tensor([[0.1, -65504.0], [6e-8, 1.0]], dtype=torch.float16),
        "lm_head.weight": torch.tensor([[0.1, 3.0e38, -1e-39]], dtype=torch.bfloat16),
    }
    stt.save_file(mixed, path)
    got = dump(path)
    want_dtype = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    for name, t in mixed.items():
        dtype, shape, values = got[name]
        assert dtype == want_dtype[t.dtype] and shape == tuple(t.shape), f"{name}: {dtype} {shape}"
        assert_same_f32(values, t.float().numpy(), name)
    # bf16 is the top half of f32: the value of pattern h has bits h << 16.
    nan = np.isnan(got["all"][2])
    assert np.array_equal(got["all"][2].view(np.uint32)[~nan], bits.astype(np.uint32)[~nan] << 16), "bf16 bits"


# ---- files written by rlpipe, read by Hugging Face --------------------------

def st_tool_expected(seed):
    """The tensors `st_tool write OUT SEED` writes (see tests/tools/st_tool.c)."""
    shapes = [("model.embed_tokens.weight", (7, 5)), ("model.layers.0.self_attn.q_proj.bias", (5,)),
              ("three_d", (2, 3, 4)), ("scalar", ()), ("empty", (0, 3)), ("eight_d", (1, 2, 1, 1, 1, 1, 1, 2)),
              ("special", (7,))]
    out = {}
    for j, (name, shape) in enumerate(shapes):
        n = int(np.prod(shape, dtype=np.int64))
        k = np.arange(n, dtype=np.int64)
        v = ((k * 7919 + seed * 31 + j * 101) % 2001 - 1000).astype(np.float32) / np.float32(3)
        if name == "special":
            v = np.array([0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x7F7FFFFF, 0x00800000],
                         dtype=np.uint32).view(np.float32)
        out[name] = v.astype(np.float32).reshape(shape)
    return out


@case
def files_written_by_st_tool_are_read_by_huggingface_bit_for_bit():
    for seed in (0, 7, 123456):
        path = os.path.join(TMP.name, f"rl_{seed}.safetensors")
        rc, _, err = st_tool("write", path, str(seed))
        assert rc == 0, f"st_tool write exited {rc}: {err}"
        got = stnp.load_file(path)
        want = st_tool_expected(seed)
        assert set(got) == set(want), f"seed {seed}: names {sorted(got)}"
        for name, w in want.items():
            g = got[name]
            assert g.dtype == np.float32 and g.shape == w.shape, f"seed {seed} {name}: {g.dtype} {g.shape}"
            assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), f"seed {seed} {name}: bits differ"


@case
def st_tool_header_is_in_the_given_order_contiguous_and_space_padded():
    path = os.path.join(TMP.name, "layout.safetensors")
    rc, _, err = st_tool("write", path, "3")
    assert rc == 0, err
    data = open(path, "rb").read()
    n, raw = header_of(data)
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    text = raw.decode()
    assert text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 8, f"padding of {text[-10:]!r}"
    header = json.loads(text)
    want = st_tool_expected(3)
    assert header.pop("__metadata__") == {"format": "pt"}, "no __metadata__ {format: pt} first"
    assert list(header) == list(want), f"order {list(header)}"
    end = 0
    for name, entry in header.items():
        assert entry["dtype"] == "F32" and tuple(entry["shape"]) == want[name].shape, f"{name}: {entry}"
        assert entry["data_offsets"] == [end, end + 4 * want[name].size], f"{name}: {entry['data_offsets']}"
        end = entry["data_offsets"][1]
    assert len(data) == 8 + n + end, f"file of {len(data)} bytes, expected {8 + n + end}"


@case
def st_tool_files_dump_back_to_the_same_values():
    path = os.path.join(TMP.name, "again.safetensors")
    rc, _, err = st_tool("write", path, "11")
    assert rc == 0, err
    got, want = dump(path), st_tool_expected(11)
    for name, w in want.items():
        assert got[name][:2] == ("F32", w.shape), f"{name}: {got[name][:2]}"
        assert_same_f32(got[name][2], w, name)


# ---- malformed files --------------------------------------------------------

def base_file():
    path = os.path.join(TMP.name, "base.safetensors")
    stnp.save_file({"model.norm.weight": np.arange(4, dtype=np.float32),
                    "model.embed_tokens.weight": np.ones((2, 3), dtype=np.float32)}, path)
    return open(path, "rb").read()


def edited(data, fn):
    """The file with fn applied to its parsed header (data area unchanged)."""
    n, raw = header_of(data)
    h = json.loads(raw)
    fn(h)
    return with_header(h, data[8 + n:])


def set_entry(name, key, value):
    def fn(h):
        h[name][key] = value
    return fn


@case
def malformed_files_are_refused_with_the_file_tensor_and_problem_named():
    base = base_file()
    n, raw = header_of(base)
    data_area = base[8 + n:]
    norm = json.loads(raw)["model.norm.weight"]["data_offsets"]
    ids = os.path.join(TMP.name, "ids.safetensors")
    stnp.save_file({"ids": np.arange(3, dtype=np.int64)}, ids)
    eight = struct.pack("<Q", 1 << 40)
    cases = [
        # (name, bytes, phrases the message contains, the reference refuses it too)
        ("truncated_data", base[:-4], ["end beyond the data area"], True),
        ("header_length_too_big", eight + base[8:], ["header length 1099511627776 is larger than"], True),
        ("header_length_beyond_file", struct.pack("<Q", len(base)) + base[8:], ["goes beyond the end of the file"], True),
        ("bad_json", struct.pack("<Q", n) + b"{\"model.norm.weight\": [" + b" " * (n - 23) + data_area,
         ["header is not valid JSON"], True),
        ("offsets_out_of_file", edited(base, set_entry("model.norm.weight", "data_offsets", [norm[0], len(data_area) + 16])),
         ["tensor 'model.norm.weight'", "end beyond the data area"], True),
        ("offsets_beyond_2_53", edited(base, set_entry("model.norm.weight", "data_offsets", [0, 2 ** 62])),
         ["tensor 'model.norm.weight'", "data_offsets [0, 4611686018427387904] are out of range"], True),
        ("overlapping", with_header({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                     "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)),
         ["tensor 'b'", "overlap tensor 'a'"], True),
        ("unsupported_dtype_i64", open(ids, "rb").read(), ["tensor 'ids'", "dtype I64 is not supported"], False),
        ("shape_size_disagreement", edited(base, set_entry("model.norm.weight", "shape", [5])),
         ["tensor 'model.norm.weight'", "hold 16 bytes, shape [5] of F32 needs 20"], True),
        ("duplicate_key", with_header('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                      '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
         ["tensor 'w' is named twice"], None),
        ("negative_dimension", edited(base, set_entry("model.norm.weight", "shape", [-4])),
         ["tensor 'model.norm.weight'", "negative dimension"], True),
        ("empty_file", b"", ["file is empty"], True),
        ("five_bytes", b"\x10\0\0\0\0", ["too short"], True),
    ]
    for name, data, phrases, reference_refuses in cases:
        path = tmpfile(name + ".safetensors", data)
        rc, out, err = st_tool("dump", path)
        assert rc == 1, f"{name}: st_tool exited {rc}, expected 1: {err.strip()}"
        assert out == "", f"{name}: output {out[:80]!r}"
        assert path in err, f"{name}: message does not name the file: {err.strip()}"
        for p in phrases:
            assert p in err, f"{name}: message lacks {p!r}: {err.strip()}"
        if reference_refuses:
            try:
                stnp.load(data)
            except Exception:
                pass
            else:
                raise AssertionError(f"{name}: the reference library accepts it: the test file is not malformed")


# ---- config.json ------------------------------------------------------------

QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": [151645, 151643], "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}


def cfg_lines(out):
    return dict(line.split(" ", 1) for line in out.strip().split("\n"))


@case
def a_qwen2_config_saves_as_the_same_model_for_transformers():
    src = tmpfile("qwen2.json", json.dumps(QWEN2).encode())
    saved = os.path.join(TMP.name, "saved.json")
    rc, out, err = st_tool("cfg", src, saved)
    assert rc == 0, err
    got = cfg_lines(out)
    want = {"model_type": "qwen2", "hidden_size": "896", "intermediate_size": "4864", "num_hidden_layers": "24",
            "num_attention_heads": "14", "num_key_value_heads": "2", "head_dim": "64", "vocab_size": "151936",
            "max_position_embeddings": "32768", "tie_word_embeddings": "1", "qkv_bias": "1", "o_bias": "0",
            "bos_token_id": "151643", "eos_token_id": "151645"}
    for k, v in want.items():
        assert got[k] == v, f"{k} {got[k]}, expected {v}"
    assert float(got["rms_norm_eps"]) == 1e-6 and float(got["rope_theta"]) == 1e6, got
    s = json.load(open(saved))
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
              "bos_token_id", "hidden_act", "model_type", "architectures", "use_sliding_window"):
        assert s[k] == QWEN2[k], f"saved {k} {s[k]!r}, expected {QWEN2[k]!r}"
    # Every eos id ends a completion: the list is written back whole.
    assert s["eos_token_id"] == QWEN2["eos_token_id"] == [151645, 151643], s
    assert s["torch_dtype"] == QWEN2["torch_dtype"] == "bfloat16" and s["head_dim"] == 64, s
    rc, out2, err = st_tool("cfg", saved)
    assert rc == 0 and out2 == out, f"reloading the saved config differs: {err}"


@case
def a_llama_config_with_bias_and_odd_doubles_round_trips_exactly():
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 300, "attention_bias": True,
           "rms_norm_eps": 0.1 + 0.2, "rope_theta": 1 / 3, "bos_token_id": None, "eos_token_id": 5}
    src = tmpfile("llama.json", json.dumps(cfg).encode())
    saved = os.path.join(TMP.name, "llama_saved.json")
    rc, out, err = st_tool("cfg", src, saved)
    assert rc == 0, err
    s = json.load(open(saved))
    assert s["architectures"] == ["LlamaForCausalLM"] and s["attention_bias"] is True, s
    assert s["rms_norm_eps"] == 0.1 + 0.2 and s["rope_theta"] == 1 / 3, (s["rms_norm_eps"], s["rope_theta"])
    assert s["bos_token_id"] is None and s["eos_token_id"] == 5 and s["head_dim"] == 8, s
    got = cfg_lines(out)
    assert got["qkv_bias"] == "1" and got["o_bias"] == "1" and got["bos_token_id"] == "-1", got


@case
def configs_that_transformers_saves_whole_are_read_as_their_diff():
    try:
        import transformers
    except ImportError as e:
        raise AssertionError(f"transformers is missing ({e}); run scripts/deps.sh test")
    for cls, kw in ((transformers.Qwen2Config, {k: v for k, v in QWEN2.items() if k not in ("architectures",)}),
                    (transformers.LlamaConfig, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                    num_attention_heads=4, vocab_size=100))):
        cfg = cls(**kw)
        whole = json.loads(cfg.to_json_string(use_diff=False))
        assert "id2label" in whole and "num_beams" in whole and "is_encoder_decoder" in whole, sorted(whole)
        a = tmpfile("whole.json", json.dumps(whole).encode())
        rc, out_whole, err = st_tool("cfg", a)
        assert rc == 0, err
        b = tmpfile("diff.json", cfg.to_json_string(use_diff=True).encode())
        rc, out_diff, err = st_tool("cfg", b)
        assert rc == 0 and out_whole == out_diff, f"{cls.__name__}: whole and diff configs read differently: {err}"
    c = json.loads(transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=4, vocab_size=100).to_json_string(use_diff=False))
    c["is_encoder_decoder"] = True
    rc, _, err = st_tool("cfg", tmpfile("ed.json", json.dumps(c).encode()))
    assert rc == 1 and "is_encoder_decoder true is not supported (only false: a decoder-only model)" in err, err


@case
def a_key_given_twice_is_refused_as_transformers_would_read_the_last():
    body = json.dumps(QWEN2)[:-1]
    for text, phrase in ((body + ', "num_hidden_layers": 2}', 'key "num_hidden_layers" appears twice'),
                         (body + ', "rope_scaling": {"rope_type": "linear", "factor": 2.0, "factor": 4.0}}',
                          'rope_scaling key "factor" appears twice')):
        assert "rope_scaling" not in QWEN2
        assert json.loads(text)  # Python reads it, taking the last value
        path = tmpfile("dup.json", text.encode())
        rc, out, err = st_tool("cfg", path)
        assert rc == 1 and f"{path}: {phrase}" in err, (rc, err)


@case
def unsupported_configs_are_refused_naming_the_key():
    cases = [
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
         'rope_scaling with rope_type "llama3" needs low_freq_factor'),
        ({"num_key_value_heads": 3, "num_attention_heads": 8, "hidden_size": 64},
         "num_key_value_heads 3 does not divide num_attention_heads 8"),
        ({"model_type": "gemma"}, 'model_type "gemma" is not supported (supported: llama, mistral, qwen2, qwen3)'),
        ({"hidden_act": "gelu"}, 'hidden_act "gelu" is not supported'),
        # an empty key (found by fuzz_config: it made the key lookup loop forever)
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "": 1}},
         'rope_scaling  1 is not supported with rope_type "linear" (it takes: factor)'),
    ]
    for edit, phrase in cases:
        cfg = dict(QWEN2, **edit)
        path = tmpfile("config.json", json.dumps(cfg).encode())
        rc, out, err = st_tool("cfg", path)
        assert rc == 1 and out == "", f"{edit}: exited {rc}"
        assert f"{path}: {phrase}" in err, f"{edit}: message {err.strip()!r} lacks {phrase!r}"


finish()
