"""Make the tiny models the engine tests serve: reproducibly, from nothing but this file.

Run it with the vLLM venv's Python (``scripts/engines/setup_vllm.sh`` creates the venv with
torch, transformers, tokenizers, safetensors and gguf in it)::

    $(python scripts/engines/common.py cache-dir)/vllm-venv/bin/python scripts/engines/make_models.py

Steps, all seeded:
1. a training corpus generated here (code-like, prose-like and ChatML chat text from fixed word
   lists and templates with ``random.Random(seed)``: the same bytes on every machine);
2. a byte-level BPE tokenizer (``tokenizers``; vocab 4096; specials ``<|endoftext|>``,
   ``<|im_start|>``, ``<|im_end|>``; a ChatML chat template) saved with
   ``PreTrainedTokenizerFast``, with ``tokenizer_config.json`` patched to name that class and
   carry the template (transformers 5 writes ``TokenizersBackend`` and only a .jinja file);
3. a Llama target (4 layers, hidden 256, 4 heads, 2 KV heads, intermediate 768) and a draft
   (1 layer, hidden 128) sharing the tokenizer, trained briefly (deterministic algorithms, a fixed
   thread count) and saved as float32 safetensors; and a "reasoner" (2 layers, hidden 128) with a
   tokenizer of its own whose specials add ``<think>`` and ``</think>``, trained only on chats whose
   every reply opens with a ``<think> ... </think>`` block (for vLLM's reasoning parser);
4. GGUF files (f32 and bf16 of both) from ``convert_hf_to_gguf.py`` of the llama.cpp source in the
   ``llama-cpp-python`` sdist (``common.llama_cpp_source()``). The converter does not know a freshly
   trained BPE vocabulary; it is run through a small wrapper that replaces
   ``TextModel.get_vocab_base_pre`` in memory so it answers ``"gpt-2"`` (our pre-tokenizer is
   GPT-2's byte-level regex). The source files are never modified.

Output: ``cache_dir()/models/<key>/`` where ``<key>`` is the sha256 (first 16 hex digits) of this
file's source and the parameters (library versions included, since they change the bytes).
A complete folder has ``DONE`` (written last) and ``manifest.json`` (sha256 of every file); it is
reused as is. ``--paths`` prints the paths of a complete build as JSON (exit 1 when there is none)
without building anything. The last stdout line of a build is the same JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import LLAMA_CPP_PYTHON_VERSION, cache_dir, file_lock, llama_cpp_source  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' ~ message['role'] ~ '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
PARAMS: dict[str, Any] = {
    "seed": 20261129, "corpus_docs": 4000, "lexicon": 6000, "vocab_size": 4096, "threads": 1,
    "seq_len": 128, "batch": 16, "lr": 2e-3, "warmup": 10, "max_position_embeddings": 2048,
    "target": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 768, "steps": 150},
    "draft": {"num_hidden_layers": 1, "hidden_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 384, "steps": 150},
    "gguf_types": ["f32", "bf16"],
    # a chat model of its own tokenizer (the specials plus <think> and </think>) that opens every reply
    # with a <think> ... </think> block, for the reasoning parsers' tests; HF only, no GGUF
    "reasoner": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "intermediate_size": 384, "steps": 300, "docs": 3000,
                 "vocab_size": 1024},
}
THINK = ("<think>", "</think>")

# ------------------------------------------------------------------------------------ corpus
NOUNS = ("cache server token queue batch stream value window river garden city letter market "
         "model kernel request engine record table index file line word page node graph").split()
VERBS = ("load read write send parse build merge split count find check update reset sort "
         "store fetch decode encode verify accept").split()
ADJS = ("small large quiet bright cold warm old new fast slow empty full early late long short "
        "careful simple").split()
PAST = ("walked ran waited looked turned stopped opened closed carried followed found kept "
        "watched moved").split()
PREPS = "over under near behind across through beside along into".split()
OPS = ["+", "-", "*", "//", "%"]
ONSETS = "b c d f g h k l m n p r s t v w z br dr kl pr st tr sh ch".split()
VOWELS = "a e i o u ai ea io ou".split()
CODAS = ["", "", "", "n", "r", "s", "l", "th", "nd", "x"]


class CorpusGen:
    """Deterministic documents from one `random.Random`: English template words mixed with a
    Zipf-distributed lexicon of pseudo-words (so the BPE finds thousands of merges)."""

    def __init__(self, seed: int, lexicon_size: int) -> None:
        self.r = random.Random(seed)
        seen: set[str] = set()
        self.lexicon: list[str] = []
        while len(self.lexicon) < lexicon_size:
            w = "".join(self.r.choice(ONSETS) + self.r.choice(VOWELS) for _ in range(self.r.randint(1, 3)))
            w += self.r.choice(CODAS)
            if w not in seen:
                seen.add(w)
                self.lexicon.append(w)
        total, self.cum = 0.0, []
        for rank in range(lexicon_size):
            total += 1.0 / (rank + 1)
            self.cum.append(total)

    def word(self) -> str:
        return self.r.choices(self.lexicon, cum_weights=self.cum)[0]

    def noun(self) -> str:
        return self.word() if self.r.random() < 0.5 else self.r.choice(NOUNS)

    def ident(self) -> str:
        return f"{self.noun()}_{self.noun()}" if self.r.random() < 0.5 else self.noun()

    def sentence(self) -> str:
        r = self.r
        s = f"The {r.choice(ADJS)} {self.noun()} {r.choice(PAST)} {r.choice(PREPS)} the {r.choice(ADJS)} {self.noun()}"
        if r.random() < 0.4:
            s += f", and {self.word().capitalize()} {r.choice(PAST)} {r.choice(PREPS)} the {self.noun()}"
        if r.random() < 0.2:
            s += f" in {r.randint(1, 2999)}"
        return s + "."

    def code(self) -> str:
        """A Python-looking function, sometimes inside a class."""
        r = self.r
        a, b = self.ident(), self.ident()
        var, i = r.choice(["result", "total", "acc", "out", self.word()]), r.choice("ijkn")
        lines = [f"def {r.choice(VERBS)}_{self.ident()}({a}, {b}):",
                 f'    """{r.choice(VERBS).capitalize()} the {self.noun()} from {a}."""',
                 f"    {var} = {a} {r.choice(OPS)} {b}"]
        for _ in range(r.randint(1, 4)):
            kind = r.randint(0, 3)
            if kind == 0:
                lines += [f"    if {var} > {r.randint(0, 999)}:", f"        return {var}"]
            elif kind == 1:
                lines += [f"    for {i} in range({b}):", f"        {var} += {i} {r.choice(OPS)} {r.randint(1, 99)}"]
            elif kind == 2:
                lines += [f"    {self.ident()} = {r.choice(VERBS)}_{self.noun()}({var}, \"{self.word()}\")"]
            else:
                lines += [f"    while {var} < {r.randint(10, 9999)}:", f"        {var} = {var} * 2"]
        lines.append(f"    return {var}")
        if r.random() < 0.3:
            cls = self.noun().capitalize() + r.choice(["Store", "Reader", "Queue", "Pool"])
            lines = [f"class {cls}:", f"    def __init__(self, {a}):", f"        self.{a} = {a}", ""] + [
                "    " + ln if ln else ln for ln in lines]
        return "\n".join(lines) + "\n"

    def prose(self) -> str:
        r = self.r
        paras = [" ".join(self.sentence() for _ in range(r.randint(2, 5))) for _ in range(r.randint(1, 3))]
        return "\n\n".join(paras) + "\n"

    def chat(self) -> str:
        r = self.r
        turns = [("system", "You are a concise assistant.")] if r.random() < 0.5 else []
        for _ in range(r.randint(1, 2)):
            noun = self.noun()
            turns.append(("user", f"How do I {r.choice(VERBS)} the {noun}?"))
            turns.append(("assistant", f"To {r.choice(VERBS)} the {noun}, {r.choice(VERBS)} the "
                                       f"{r.choice(ADJS)} {self.noun()} first. {self.sentence()}"))
        return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)


    def reasoning_chat(self) -> str:
        """A chat whose every assistant reply opens with `<think> ... </think>` (one to three sentences
        of reasoning), then answers in a sentence."""
        r = self.r
        turns = []
        for _ in range(r.randint(1, 2)):
            noun = self.noun()
            verb = r.choice(VERBS)
            thought = " ".join(self.sentence() for _ in range(r.randint(1, 3)))
            turns.append(("user", f"How do I {verb} the {noun}?"))
            turns.append(("assistant", f"{THINK[0]}\nThe user asks how to {verb} the {noun}. {thought}\n{THINK[1]}\n\n"
                                       f"To {verb} the {noun}, {r.choice(VERBS)} the {r.choice(ADJS)} {self.noun()} first."))
        return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)


def make_corpus(seed: int, docs: int, lexicon_size: int) -> list[str]:
    """`docs` documents: 45 % code, 40 % prose, 15 % chat; the same list for the same seed."""
    g = CorpusGen(seed, lexicon_size)
    out = []
    for _ in range(docs):
        x = g.r.random()
        out.append(g.code() if x < 0.45 else g.prose() if x < 0.85 else g.chat())
    return out


# -------------------------------------------------------------------------------- tokenizer
def make_tokenizer(docs: list[str], out: Path, vocab_size: int, specials: list[str] = SPECIALS) -> Any:
    """Train the byte-level BPE and save it as a PreTrainedTokenizerFast in `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   unk_token=None, bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                "add_bos_token": False, "add_eos_token": False, "model_max_length": PARAMS["max_position_embeddings"]})
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return fast


# ------------------------------------------------------------------------------------ models
def make_model(name: str, spec: dict[str, Any], blocks: Any, tok: Any, out: Path) -> dict[str, Any]:
    """Build, train and save one Llama model; returns its training log."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    seed = PARAMS["seed"] + (0 if name == "target" else 1)
    eos, end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tok), num_hidden_layers=spec["num_hidden_layers"], hidden_size=spec["hidden_size"],
        num_attention_heads=spec["num_attention_heads"], num_key_value_heads=spec["num_key_value_heads"],
        intermediate_size=spec["intermediate_size"], max_position_embeddings=PARAMS["max_position_embeddings"],
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False, rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=PARAMS["lr"], weight_decay=0.0)
    steps, warm = spec["steps"], PARAMS["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.1, 1 - s / steps))
    model.train()
    losses, t0 = [], time.monotonic()
    for _ in range(steps):
        batch = blocks[torch.randint(0, blocks.shape[0], (PARAMS["batch"],), generator=gen)]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(float(loss.detach()), 4))
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=[eos, end], pad_token_id=eos,
                                               do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    tok_cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                    "add_bos_token": False, "add_eos_token": False})
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2, sort_keys=True) + "\n")
    params = sum(p.numel() for p in model.parameters())
    return {"parameters": params, "steps": steps, "first_loss": losses[0], "last_loss": losses[-1],
            "train_s": round(time.monotonic() - t0, 1)}


def token_blocks(docs: list[str], tok: Any, seq_len: int) -> Any:
    """All documents joined by <|endoftext|>, tokenized, cut into rows of seq_len ids."""
    import torch

    ids = tok("<|endoftext|>".join(docs))["input_ids"]
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


# -------------------------------------------------------------------------------------- gguf
CONVERT_WRAPPER = """
import runpy, sys
vendor = sys.argv[1]
sys.path[:0] = [vendor, vendor + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # our byte-level BPE is GPT-2's
sys.argv = [vendor + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def to_gguf(hf_dir: Path, out: Path, outtype: str, name: str, vendor: Path) -> float:
    """Convert one HF folder to GGUF with the bundled converter; returns seconds taken."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", CONVERT_WRAPPER, str(vendor), str(hf_dir), "--outfile", str(out),
                    "--outtype", outtype, "--model-name", name], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    return round(time.monotonic() - t0, 1)


# ------------------------------------------------------------------------------------- build
def toolchain() -> dict[str, str]:
    """Versions of the libraries whose output bytes the build depends on."""
    out = {"python": ".".join(map(str, sys.version_info[:2])), "llama-cpp-python": LLAMA_CPP_PYTHON_VERSION}
    for dist in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "missing"
    return out


def build_key() -> str:
    """sha256 of this file's source and the parameters (toolchain included), 16 hex digits."""
    blob = Path(__file__).read_bytes() + json.dumps({"params": PARAMS, "toolchain": toolchain()},
                                                    sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def paths_of(root: Path) -> dict[str, str]:
    """The paths the tests use, inside one build folder."""
    p = {"root": root, "target": root / "hf" / "target", "draft": root / "hf" / "draft",
         "reasoner": root / "hf" / "reasoner"}
    for who in ("target", "draft"):
        for t in PARAMS["gguf_types"]:
            p[f"{who}_{t}_gguf"] = root / "gguf" / f"{who}-{t}.gguf"
    return {k: str(v) for k, v in p.items()}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(root: Path) -> dict[str, Any]:
    """Build everything into `root` (a fresh folder); returns the manifest."""
    import torch

    torch.set_num_threads(PARAMS["threads"])
    torch.use_deterministic_algorithms(True)
    times: dict[str, float] = {}
    t0 = time.monotonic()
    docs = make_corpus(PARAMS["seed"], PARAMS["corpus_docs"], PARAMS["lexicon"])
    (root / "corpus.txt").write_text("<|endoftext|>".join(docs))
    tok = make_tokenizer(docs, root / "tokenizer", PARAMS["vocab_size"])
    blocks = token_blocks(docs, tok, PARAMS["seq_len"])
    times["corpus_and_tokenizer_s"] = round(time.monotonic() - t0, 1)
    training = {}
    for name in ("target", "draft"):
        t = time.monotonic()
        training[name] = make_model(name, PARAMS[name], blocks, tok, root / "hf" / name)
        times[f"{name}_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    g = CorpusGen(PARAMS["seed"] + 2, PARAMS["lexicon"] // 4)
    chats = [g.reasoning_chat() for _ in range(PARAMS["reasoner"]["docs"])]
    rtok = make_tokenizer(chats, root / "reasoner-tokenizer", PARAMS["reasoner"]["vocab_size"], SPECIALS + list(THINK))
    training["reasoner"] = make_model("reasoner", PARAMS["reasoner"], token_blocks(chats, rtok, PARAMS["seq_len"]),
                                      rtok, root / "hf" / "reasoner")
    times["reasoner_s"] = round(time.monotonic() - t, 1)
    vendor = llama_cpp_source()
    (root / "gguf").mkdir()
    for name in ("target", "draft"):
        for t in PARAMS["gguf_types"]:
            times[f"gguf_{name}_{t}_s"] = to_gguf(root / "hf" / name, root / "gguf" / f"{name}-{t}.gguf", t,
                                                  f"loadgate-tiny-{name}", vendor)
    files = {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}
    return {"params": PARAMS, "toolchain": toolchain(), "training": training, "times": times,
            "token_blocks": int(blocks.shape[0]), "files": files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", action="store_true", help="print the paths of a complete build; build nothing")
    ap.add_argument("--force", action="store_true", help="rebuild even when a complete build exists")
    args = ap.parse_args(argv)
    models = cache_dir() / "models"
    root = models / build_key()
    if args.paths:
        if (root / "DONE").exists():
            print(json.dumps(paths_of(root)))
            return 0
        print(f"no complete build at {root}: run scripts/engines/make_models.py", file=sys.stderr)
        return 1
    with file_lock(models / f".{root.name}.lock"):
        if (root / "DONE").exists() and not args.force:
            print(f"make_models: reusing {root}", file=sys.stderr)
        else:
            t0 = time.monotonic()
            partial = models / f".{root.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            manifest = build(partial)
            manifest["build_s"] = round(time.monotonic() - t0, 1)
            (partial / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            shutil.rmtree(root, ignore_errors=True)
            partial.rename(root)
            (root / "DONE").write_text(f"{manifest['build_s']}\n")
            print(f"make_models: built {root} in {manifest['build_s']} s "
                  f"(times: {json.dumps(manifest['times'])})", file=sys.stderr)
    print(json.dumps(paths_of(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
