"""Record llama-server's /v1 answers (and /metrics around them) as test data for the offline suite.

Usage: python scripts/engines/record_llama_v1.py URL OUT_DIR
URL is a running llama-server with draft-model speculation (scripts/engines/llama.py serve ...
--spec draft), one slot, nothing else talking to it. The requests are the ones loadgate's
`llamacpp-openai-*` adapters send (their bodies are built here by those adapters), greedy, so
the recorded ids are the server's own; the files are written byte for byte as received.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from loadgate.engine.adapters import adapter_for  # noqa: E402
from loadgate.engine.adapters.base import GenRequest  # noqa: E402

PROMPT = "The quiet river walked over the old garden"
REQUESTS = [  # (file, api, stream, logprobs)
    ("v1_completions_stream_verbose.sse", "llamacpp-openai-completions", True, 2),
    ("v1_completions_verbose.json", "llamacpp-openai-completions", False, 2),
    ("v1_chat_stream_verbose.sse", "llamacpp-openai-chat", True, 2),
    ("v1_chat_verbose.json", "llamacpp-openai-chat", False, 2),
    ("v1_completions_stream_nologprobs.sse", "llamacpp-openai-completions", True, None),
]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()  # type: ignore[no-any-return]


def main() -> None:
    url, out = sys.argv[1].rstrip("/"), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics_before.txt").write_bytes(get(url + "/metrics"))
    for name, api, stream, logprobs in REQUESTS:
        a = adapter_for(api)
        req = GenRequest(max_tokens=24, prompt_text=PROMPT, ignore_eos=True, logprobs=logprobs, stream=stream)
        body = a.build_body(req, "tiny")
        r = urllib.request.Request(url + a.path, data=orjson.dumps(body), headers={"content-type": "application/json"})
        with urllib.request.urlopen(r, timeout=120) as resp:
            (out / name).write_bytes(resp.read())
        (out / (name.rsplit(".", 1)[0] + ".request.json")).write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
    (out / "metrics_after.txt").write_bytes(get(url + "/metrics"))
    (out / "props.json").write_bytes(get(url + "/props"))


if __name__ == "__main__":
    main()
