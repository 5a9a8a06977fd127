"""ingest.py - fill the Python baseline's store: embed every passage with
llama-cpp-python (e5, "passage: " + section + newline + text, mean pooled,
L2-normalised: what ours embeds) into chromadb, and index it in SQLite FTS5.

    python ingest.py --config tests/bench/rag_bench.yaml --pipeline rag \
        --passages PASSAGES.jsonl --store DIR [--threads N]

PASSAGES.jsonl: one {"id", "source", "section", "pos", "text"} per line, our
base's chunks as tools/rag_bench.sh exports them (the same passages on both
sides). DIR is emptied first. Prints one line: passages, seconds.
"""
import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag import Pipeline, Store, load_encoder, passage_for_embedding, read_passages  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--pipeline", default="rag")
    ap.add_argument("--passages", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    pipe = Pipeline(a.config, a.pipeline)
    passages = read_passages(a.passages)
    if not passages:
        sys.exit("ingest: %s holds no passages" % a.passages)
    t0 = time.time()
    enc = load_encoder(pipe, a.threads)
    vectors = [enc.embed(passage_for_embedding(p), normalize=True) for p in passages]
    shutil.rmtree(a.store, ignore_errors=True)
    os.makedirs(a.store)
    Store(a.store).create(passages, vectors)
    print("ingest: %d passages, %d dimensions, %.1f s" % (len(passages), len(vectors[0]), time.time() - t0))


if __name__ == "__main__":
    main()
