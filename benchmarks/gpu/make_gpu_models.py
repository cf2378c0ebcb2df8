"""Models for the GPU validation run, made on the lent H200 in about two minutes.

The CPU engine tests use 5 M-parameter models (scripts/engines/make_models.py); on a GPU those are
too small to show the effects seen in production (batch-dependent kernels, near-ties). This
script reuses that file's corpus, tokenizer and GGUF conversion, and trains bigger Llama models on
the GPU with fixed seeds: a target of 8 layers / hidden 1024 / 8 heads / 4 KV heads / FFN 2816
(about 103 M parameters) and a draft of 2 layers / hidden 256 sharing the tokenizer, 400 steps each,
then converts both to GGUF f16, bf16 and f32 with the bundled converter.

    python3 benchmarks/gpu/make_gpu_models.py --out DIR --vendor PATH/TO/llama.cpp
"""

from __future__ import annotations

import argparse
import json
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


def train(name: str, spec: dict[str, Any], blocks: Any, tok: Any, out: Path, device: str = "cuda") -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    seed = 1234 + (0 if name == "target" else 1)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(tok), num_hidden_layers=spec["num_hidden_layers"],
                      hidden_size=spec["hidden_size"], num_attention_heads=spec["num_attention_heads"],
                      num_key_value_heads=spec["num_key_value_heads"], intermediate_size=spec["intermediate_size"],
                      max_position_embeddings=4096, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(device)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    t0, losses = time.monotonic(), []
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
    return {"parameters": sum(p.numel() for p in model.parameters()), "first_loss": round(losses[0], 3),
            "last_loss": round(losses[-1], 3), "train_s": round(time.monotonic() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vendor", type=Path, required=True, help="the llama.cpp source folder (holds the converter)")
    ap.add_argument("--smoke", action="store_true", help="tiny models, 2 steps, on the CPU: checks the flow only")
    a = ap.parse_args()
    device = "cpu" if a.smoke else "cuda"
    sizes = {k: {**v, "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "steps": 2}
             for k, v in SIZES.items()} if a.smoke else SIZES
    t0 = time.monotonic()
    docs = mm.make_corpus(mm.PARAMS["seed"], mm.PARAMS["corpus_docs"] // (8 if a.smoke else 1), mm.PARAMS["lexicon"])
    tok = mm.make_tokenizer(docs, a.out / "tokenizer", mm.PARAMS["vocab_size"])
    blocks = mm.token_blocks(docs, tok, SEQ)
    report: dict[str, Any] = {"tokenizer_s": round(time.monotonic() - t0, 1), "blocks": int(blocks.shape[0])}
    for name, spec in sizes.items():
        report[name] = train(name, spec, blocks, tok, a.out / "hf" / name, device)
    (a.out / "gguf").mkdir(parents=True, exist_ok=True)
    for name in sizes:
        for t in ("f16", "bf16", "f32"):
            report[f"gguf_{name}_{t}_s"] = mm.to_gguf(a.out / "hf" / name, a.out / "gguf" / f"{name}-{t}.gguf", t,
                                                      f"loadgate-gpu-{name}", a.vendor)
    report["total_s"] = round(time.monotonic() - t0, 1)
    (a.out / "models.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
