"""Models for the GPU validation run, made on the lent H200 in about two minutes.

The CPU engine tests use 5 M-parameter models (scripts/engines/make_models.py); on a GPU those are
too small to show the effects seen in production (batch-dependent kernels, near-ties). This
script reuses that file's corpus, tokenizer and GGUF conversion, and trains bigger Llama models on
the GPU with fixed seeds: a target of 8 layers / hidden 1024 / 8 heads / 4 KV heads / FFN 2816
(about 103 M parameters) and a draft of 2 layers / hidden 256 sharing the tokenizer, 400 steps each;
both with 16,384 positions (prompts of 8k tokens and more fit; they train on blocks of 256, so
long positions are untrained, which exactness checks do not mind: the outputs are still fixed by
the weights). Besides them, for the matrix's rows:
- `draft-random`: the draft's shape with its initial random weights and no training, so nearly
  every drafted token is rejected (the forced-rejection row);
- `lora`: a rank-8 LoRA adapter of the target's q/v projections with random (seeded) weights,
  written in the PEFT layout and converted with the bundled `convert_lora_to_gguf.py` (loaded
  unapplied, it must change nothing).
Everything is converted to GGUF f16; `models.json` gives each file's sha256, so a second machine's
models can be compared with the first's (training is seeded; the GPU's kernels decide whether the
bytes agree).

    python3 benchmarks/gpu/make_gpu_models.py --out DIR --vendor PATH/TO/llama.cpp
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "engines"))
import make_models as mm  # noqa: E402

SIZES: dict[str, dict[str, Any]] = {
    "target": {"num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 4,
               "intermediate_size": 2816, "steps": 400},
    "draft": {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 704, "steps": 400},
}
SEQ, BATCH, LR = 256, 32, 1e-3
POSITIONS = 16384


def train(name: str, spec: dict[str, Any], blocks: Any, tok: Any, out: Path, device: str = "cuda") -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    seed = 1234 + (0 if name == "target" else 1)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(tok), num_hidden_layers=spec["num_hidden_layers"],
                      hidden_size=spec["hidden_size"], num_attention_heads=spec["num_attention_heads"],
                      num_key_value_heads=spec["num_key_value_heads"], intermediate_size=spec["intermediate_size"],
                      max_position_embeddings=POSITIONS, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(device)
    if spec["steps"] == 0:  # draft-random: the initial weights as they are
        losses = [float("nan")]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    t0, losses = time.monotonic(), losses if spec["steps"] == 0 else []
    for step in range(spec["steps"]):
        for g in opt.param_groups:
            g["lr"] = LR * min(1.0, (step + 1) / 20) * max(0.1, 1 - step / spec["steps"])
        batch = blocks[torch.randint(0, blocks.shape[0], (BATCH,), generator=gen)].to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    model = model.float().cpu().eval()
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc.update({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": mm.CHAT_TEMPLATE})
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, sort_keys=True))
    first, last = (None, None) if spec["steps"] == 0 else (round(losses[0], 3), round(losses[-1], 3))
    return {"parameters": sum(p.numel() for p in model.parameters()), "first_loss": first, "last_loss": last, "train_s": round(time.monotonic() - t0, 1), "steps": spec["steps"]}


def lora_adapter(target: Path, out: Path, rank: int = 8, alpha: float = 16.0) -> dict[str, Any]:
    """A PEFT-layout LoRA adapter for the target's q_proj and v_proj, random (seeded) A and B, so
    applying it at scale 1 changes the outputs and loading it unapplied must not."""
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((target / "config.json").read_text())
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    kv = cfg["num_key_value_heads"] * hidden // cfg["num_attention_heads"]
    gen = torch.Generator().manual_seed(4321)
    tensors = {}
    for i in range(layers):
        for proj, width in (("q_proj", hidden), ("v_proj", kv)):
            key = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{key}.lora_A.weight"] = (torch.randn(rank, hidden, generator=gen) * 0.05).contiguous()
            tensors[f"{key}.lora_B.weight"] = (torch.randn(width, rank, generator=gen) * 0.05).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "base_model_name_or_path": str(target), "r": rank, "lora_alpha": alpha,
        "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM"}))
    return {"rank": rank, "alpha": alpha, "tensors": len(tensors)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vendor", type=Path, required=True, help="the llama.cpp source folder (holds the converter)")
    ap.add_argument("--smoke", action="store_true", help="tiny models, 2 steps, on the CPU: checks the flow only")
    a = ap.parse_args()
    device = "cpu" if a.smoke else "cuda"
    sizes = {k: {**v, "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "intermediate_size": 128, "steps": 2}  # heads of 32: a q8_0 KV cache's block
             for k, v in SIZES.items()} if a.smoke else SIZES
    t0 = time.monotonic()
    docs = mm.make_corpus(mm.PARAMS["seed"], mm.PARAMS["corpus_docs"] // (8 if a.smoke else 1), mm.PARAMS["lexicon"])
    tok = mm.make_tokenizer(docs, a.out / "tokenizer", mm.PARAMS["vocab_size"])
    blocks = mm.token_blocks(docs, tok, SEQ)
    report: dict[str, Any] = {"tokenizer_s": round(time.monotonic() - t0, 1), "blocks": int(blocks.shape[0])}
    sizes["draft-random"] = {**sizes["draft"], "steps": 0}
    for name, spec in sizes.items():
        report[name] = train(name, spec, blocks, tok, a.out / "hf" / name, device)
    report["lora"] = lora_adapter(a.out / "hf" / "target", a.out / "hf" / "lora")
    g = a.out / "gguf"
    g.mkdir(parents=True, exist_ok=True)
    for name in sizes:
        report[f"gguf_{name}_f16_s"] = mm.to_gguf(a.out / "hf" / name, g / f"{name}-f16.gguf", "f16",
                                                  f"loadgate-gpu-{name}", a.vendor)
    t = time.monotonic()
    subprocess.run([sys.executable, str(a.vendor / "convert_lora_to_gguf.py"), "--base", str(a.out / "hf" / "target"),
                    "--outtype", "f16", "--outfile", str(g / "lora-f16.gguf"), str(a.out / "hf" / "lora")],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    report["gguf_lora_f16_s"] = round(time.monotonic() - t, 1)
    report["sha256"] = {f.name: mm.sha256_file(f) for f in sorted(g.glob("*.gguf"))}
    report["total_s"] = round(time.monotonic() - t0, 1)
    (a.out / "models.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
