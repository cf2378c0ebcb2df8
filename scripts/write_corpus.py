"""Write the shipped reference corpus (`workloads/reference.jsonl`, or PATH), validate it, say so.

    python scripts/write_corpus.py [PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgate.exactness.corpus import (  # noqa: E402
    build_reference_cases,
    default_corpus_path,
    load_corpus,
    render_jsonl,
)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else default_corpus_path()
    path.write_bytes(render_jsonl(build_reference_cases()))
    corpus = load_corpus(path)
    print(f"wrote {len(corpus.cases)} cases to {path} (sha256 {corpus.sha256})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
