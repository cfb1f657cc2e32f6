"""A completion ends at every id of the model's eos_token_id (a list, as
Llama 3.x Instruct has [128001, 128008, 128009], joined by
generation_config.json's), and at a --stop string that is a special token,
which the text (decoded without special tokens) could never contain
(man/rl-sample.1: --stop, finish).

The model is a random one whose output layer is zero, so that every token is
equally likely (1/448) and the special tokens come up in a few thousand
draws; the tokenizer is the tiny model's (<|bos|> 445, <|eos|> 446, <|pad|>
447, all special).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import rltest  # noqa: E402
import torch  # noqa: E402
from rltest import case  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="rlpipe-stops.", dir=os.environ.get("TMPDIR"))
EOS, PAD = llama_ref.TINY_EOS, 447


def uniform_model(name, config_eos, generation_eos=None):
    d = os.path.join(WORK, name)
    llama_ref.random_model(d, hidden=32, inter=48, layers=1, heads=2, kv_heads=1, vocab=448, seed=3)
    llama_ref.add_tiny_tokenizer(d)
    w = load_file(os.path.join(d, "model.safetensors"))
    w["lm_head.weight"] = torch.zeros_like(w["lm_head.weight"])
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["eos_token_id"] = config_eos
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    if generation_eos is not None:
        json.dump({"eos_token_id": generation_eos, "temperature": 0.6, "top_p": 0.9, "do_sample": True},
                  open(os.path.join(d, "generation_config.json"), "w"))
    return d


PROMPTS = rltest.tmpfile("stops.jsonl", "".join(json.dumps({"prompt": f"What is {i}+1?"}) + "\n"
                                                 for i in range(16)).encode())


def sample(model, *args):
    rc, out, err = rltest.run("rl-sample", "--model", model, "-n", "8", "--max-new-tokens", "200", "--seed", "7",
                              *args, PROMPTS)
    assert rc == 0, err
    members = rltest.read_stream(out)
    return members[0][0], [r for _, recs, _ in members for r in recs]


def check_ends(recs, stops):
    """Every completion ends at its first stop id, with finish "stop", or runs
    to the length limit without one; returns how many ended at each id."""
    ends = {s: 0 for s in stops}
    for r in recs:
        ids = r["ids"]
        first = next((k for k, t in enumerate(ids) if t in stops), None)
        if first is None:
            assert r["finish"] == "length" and len(ids) == 200, (r["finish"], len(ids))
        else:
            assert first == len(ids) - 1 and r["finish"] == "stop", (first, len(ids), r["finish"])
            ends[ids[-1]] += 1
    return ends


@case
def every_id_of_an_eos_list_ends_a_completion():
    _, recs = sample(uniform_model("list", [EOS, PAD]))
    ends = check_ends(recs, {EOS, PAD})
    assert ends[EOS] > 5 and ends[PAD] > 5, ends


@case
def generation_config_eos_ids_join_the_configs_and_its_sampling_defaults_are_shown_not_applied():
    header, recs = sample(uniform_model("gen", EOS, [PAD]), "--temperature", "1")
    ends = check_ends(recs, {EOS, PAD})
    assert ends[EOS] > 5 and ends[PAD] > 5, ends
    shown = header["model"].get("generation_config", "")
    assert "temperature 0.6" in shown and "top_p 0.9" in shown, header["model"]
    assert header["sampling"]["temperature"] == 1 and header["sampling"]["top_p"] == 1, header["sampling"]
    assert all(r["temperature"] == 1 for r in recs)


@case
def a_stop_string_that_is_a_special_token_ends_at_that_token():
    _, recs = sample(uniform_model("single", EOS), "--stop", "<|pad|>")
    ends = check_ends(recs, {EOS, PAD})
    assert ends[EOS] > 5 and ends[PAD] > 5, ends
    _, plain = sample(uniform_model("plain", EOS))
    assert any(PAD in r["ids"][:-1] for r in plain), "without --stop, <|pad|> does not end a completion"


rltest.finish()
