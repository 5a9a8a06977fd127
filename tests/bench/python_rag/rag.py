"""rag.py - the Python RAG baseline of tools/rag_bench.sh: what a Python team
would build from PyPI to answer policy questions from the demo base.

    llama-cpp-python   the same GGUF files as ours: multilingual-e5-small
                       (embedding mode, mean pooling) for the vectors,
                       Qwen2.5-Coder-0.5B-Instruct for the answer, through
                       create_chat_completion and the GGUF's chat template
    chromadb           in-process, cosine space, vectors supplied by us (no
                       embedding function, nothing downloaded at run time)
    SQLite FTS5        the BM25 half
    fusion             the two top-50 lists as ours fuses them: each list's
                       scores placed on [0, 1] between its best and its
                       last, 0.95 x the vectors' + 0.05 x BM25's

Everything that decides the answer is ours' too, on purpose (the benchmark
compares serving stacks, not retrieval recipes): the passages are our
base's chunks (exported by the bench, so chunking is not measured), the
FTS5 index holds CJK bigrams with porter unicode61 for the rest, a question
becomes quoted terms OR-ed and ranked by bm25(fts, 1.0, 0.5), and the
system text, prompt template, top_k and max_tokens are read from our
pipeline's config (tests/bench/rag_bench.yaml). kb/fts.c and kb/kb.c are
what this file mirrors.

The models are not thread-safe: one lock each, held for an embedding or a
whole generation (llama-cpp-python's own server does the same). ctypes
releases the GIL in the C calls, so an embedding can run beside a
generation, as our encoder worker runs beside the composer.
"""
import json
import math
import os
import sqlite3
import threading
import time

import yaml

BM25_WEIGHT = 0.05   # kb/sb_kb.h SB_KB_BM25_WEIGHT: BM25 breaks the vectors' near-ties
CANDIDATES = 50     # kb/kb.c DEFAULT_CANDIDATES: each list's depth before fusion
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
COLLECTION = "policy"


# --------------------------------------------------------------- BM25 text

def _cjk_letter(cp):
    return (0x3040 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7AF or 0xF900 <= cp <= 0xFAFF
            or 0x20000 <= cp <= 0x3FFFF)


def _term_char(cp):
    if cp < 0x80:
        return chr(cp).isascii() and chr(cp).isalnum()
    if 0x2000 <= cp <= 0x206F or 0x3000 <= cp <= 0x303F:
        return False
    if 0xFF00 <= cp <= 0xFF0F or 0xFF1A <= cp <= 0xFF20 or 0xFF3B <= cp <= 0xFF40 or 0xFF5B <= cp <= 0xFF65:
        return False
    return cp not in (0xA0, 0xFFFD)


def bigram_text(s):
    """Every run of CJK letters replaced by its overlapping bigrams, each
    between spaces (a lone letter stays); the rest as it is."""
    out, i, n = [], 0, len(s)
    while i < n:
        if not _cjk_letter(ord(s[i])):
            out.append(s[i])
            i += 1
            continue
        j = i
        while j < n and _cjk_letter(ord(s[j])):
            j += 1
        run = s[i:j]
        if len(run) == 1:
            out.append(" " + run + " ")
        else:
            out.extend(" " + run[k:k + 2] + " " for k in range(len(run) - 1))
        i = j
    return "".join(out)


def fts_query(question):
    """A question as an FTS5 expression: its terms (bigrams for Chinese)
    quoted, each once, OR-ed; never FTS5 syntax."""
    t, terms, i = bigram_text(question), [], 0
    while i < len(t):
        j = i
        while j < len(t) and _term_char(ord(t[j])):
            j += 1
        if j > i:
            term = '"' + t[i:j] + '"'
            if term not in terms:
                terms.append(term)
            i = j
        else:
            i += 1
    return " OR ".join(terms)


# ----------------------------------------------------------------- config

class Pipeline:
    """The retrieve and generate stages of our pipeline's config, and its
    models' files and settings."""

    def __init__(self, config_path, name):
        with open(config_path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
        base = os.path.dirname(os.path.abspath(config_path))
        stages = cfg["pipelines"][name]["stages"]
        kinds = [s["kind"] for s in stages]
        if kinds != ["retrieve", "generate"]:
            raise ValueError("%s: pipeline %s must be retrieve -> generate, is %s" % (config_path, name, kinds))
        self.name = name
        self.retrieve, self.generate = stages
        if self.retrieve.get("mode", "hybrid") != "hybrid" or "rerank" in self.retrieve or "min_score" in self.retrieve:
            raise ValueError("%s: the baseline implements plain hybrid retrieval only" % config_path)
        self.top_k = int(self.retrieve.get("top_k", 3))
        self.max_tokens = int(self.generate.get("max_tokens", 512))
        self.temperature = float(self.generate.get("temperature", 0))
        self.system = self.generate.get("system")
        self.prompt = self.generate["prompt"]
        kb = cfg["knowledge"][self.retrieve["kb"]]
        self.embed_model = self._model(cfg, base, kb["embed_model"])
        self.gen_model = self._model(cfg, base, self.generate["model"])
        for key in ("query",):
            if self.retrieve.get(key, "{{input}}") != "{{input}}":
                raise ValueError("%s: retrieve.%s must be {{input}}" % (config_path, key))

    @staticmethod
    def _model(cfg, base, name):
        m = dict(cfg["models"][name])
        m["gguf"] = os.path.normpath(os.path.join(base, m["gguf"]))
        return m

    def render(self, passages_text, question):
        """The user message, as our template engine renders the prompt."""
        out = self.prompt.replace("{{stages.%s.output}}" % self.retrieve["name"], passages_text)
        out = out.replace("{{input}}", question)
        if "{{" in out.replace(question, "").replace(passages_text, ""):
            raise ValueError("prompt template uses a variable the baseline does not know: %r" % self.prompt)
        return out


def passages_text(hits):
    """The retrieve stage's output: "[1] SOURCE > SECTION\\nTEXT" blocks."""
    blocks = []
    for i, h in enumerate(hits):
        head = "[%d] %s" % (i + 1, h["source"]) + (" > " + h["section"] if h["section"] else "")
        blocks.append(head + "\n" + h["text"])
    return "\n\n".join(blocks).strip()


def score4(x):
    """Four decimals, cut toward zero, as ours prints a passage's score."""
    return math.trunc(x * 1e4) / 1e4


# ------------------------------------------------------------------ store

def passage_for_embedding(p):
    return "passage: " + (p["section"] + "\n" if p["section"] else "") + p["text"]


class Store:
    """chromadb (vectors) and a SQLite file (chunk rows + FTS5) in STORE_DIR."""

    def __init__(self, store_dir):
        import chromadb
        from chromadb.config import Settings
        self.dir = store_dir
        self.db_path = os.path.join(store_dir, "chunks.sqlite")
        self.client = chromadb.PersistentClient(path=os.path.join(store_dir, "chroma"),
                                                settings=Settings(anonymized_telemetry=False))
        self.col = self.client.get_or_create_collection(COLLECTION, embedding_function=None,
                                                        metadata={"hnsw:space": "cosine"})
        self._local = threading.local()
        self._chroma_lock = threading.Lock()

    def db(self):
        c = getattr(self._local, "db", None)
        if c is None:
            c = self._local.db = sqlite3.connect(self.db_path)
        return c

    def create(self, passages, vectors):
        db = self.db()
        db.executescript("DROP TABLE IF EXISTS chunks; DROP TABLE IF EXISTS fts;"
                         "CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT, section TEXT, pos INTEGER, text TEXT);"
                         "CREATE VIRTUAL TABLE fts USING fts5(body, section, tokenize = '%s');" % FTS_TOKENIZER)
        for p in passages:
            db.execute("INSERT INTO chunks VALUES(?, ?, ?, ?, ?)", (p["id"], p["source"], p["section"], p["pos"], p["text"]))
            db.execute("INSERT INTO fts(rowid, body, section) VALUES(?, ?, ?)",
                       (p["id"], bigram_text(p["text"]), bigram_text(p["section"])))
        db.commit()
        self.col.upsert(ids=[str(p["id"]) for p in passages], embeddings=vectors,
                        metadatas=[{"source": p["source"], "section": p["section"]} for p in passages])

    def bm25(self, question, k):
        match = fts_query(question)
        if not match:
            return []
        rows = self.db().execute("SELECT rowid, -bm25(fts, 1.0, 0.5) FROM fts WHERE fts MATCH ?1 "
                                 "ORDER BY bm25(fts, 1.0, 0.5) LIMIT ?2", (match, k)).fetchall()
        return [(int(r[0]), r[1]) for r in rows]

    def vectors(self, qvec, k):
        with self._chroma_lock:
            n = min(k, self.col.count())
            r = self.col.query(query_embeddings=[qvec], n_results=n, include=["distances"])
        return [(int(i), 1.0 - d) for i, d in zip(r["ids"][0], r["distances"][0])]

    def fetch(self, cid):
        row = self.db().execute("SELECT source, section, text FROM chunks WHERE id = ?", (cid,)).fetchone()
        return None if row is None else {"source": row[0], "section": row[1], "text": row[2]}


def spread_pos(lst, i):
    """Where entry i stands between the list's best (1) and its last (0)."""
    hi, lo = lst[0][1], lst[-1][1]
    return (lst[i][1] - lo) / (hi - lo) if hi > lo else 1.0


def fuse(bm, vec):
    """kb/kb.c's hybrid fusion: (1 - w) x the vectors' place + w x BM25's
    (0 when not in a list; one list alone decides when the other is empty);
    each chunk keeps its cosine (0 when only BM25 found it), the best first."""
    w = BM25_WEIGHT if bm and vec else (1.0 if bm else 0.0)
    fused, order = {}, []
    for i, (cid, _) in enumerate(bm):
        fused[cid] = [w * spread_pos(bm, i), 0.0]
        order.append(cid)
    for j, (cid, cos) in enumerate(vec):
        if cid not in fused:
            fused[cid] = [0.0, 0.0]
            order.append(cid)
        fused[cid][0] += (1 - w) * spread_pos(vec, j)
        fused[cid][1] = cos
    return sorted(((cid, fused[cid][0], fused[cid][1]) for cid in order), key=lambda t: -t[1])


# ------------------------------------------------------------------ models

def load_encoder(pipe, threads=None):
    """e5 in llama.cpp's embedding mode, mean pooled, with the config's
    threads unless told otherwise."""
    from llama_cpp import Llama, LLAMA_POOLING_TYPE_MEAN
    e = pipe.embed_model
    t = threads or int(e.get("threads", 2))
    return Llama(model_path=e["gguf"], embedding=True, pooling_type=LLAMA_POOLING_TYPE_MEAN, n_ctx=512, n_batch=512,
                 n_ubatch=512, n_threads=t, n_threads_batch=t, verbose=False)


def load_models(pipe, threads=None, embed_threads=None):
    """(encoder, generator) with the config's threads and ctx; threads and
    embed_threads override them (the baseline's tuning knobs)."""
    from llama_cpp import Llama
    g = pipe.gen_model
    gt = threads or int(g.get("threads", 2))
    enc = load_encoder(pipe, embed_threads)
    gen = Llama(model_path=g["gguf"], n_ctx=int(g.get("ctx", 2048)), n_batch=512, n_threads=gt,
                n_threads_batch=gt, verbose=False)
    return enc, gen


class Rag:
    def __init__(self, config_path, pipeline, store_dir, threads=None, embed_threads=None):
        self.pipe = Pipeline(config_path, pipeline)
        self.store = Store(store_dir)
        self.enc, self.gen = load_models(self.pipe, threads, embed_threads)
        self.enc_lock = threading.Lock()
        self.gen_lock = threading.Lock()

    def embed_query(self, text):
        with self.enc_lock:
            return self.enc.embed("query: " + text, normalize=True)

    def retrieve(self, question):
        """The stage's JSON and text output, and its time in ms."""
        t0 = time.perf_counter()
        k = max(self.pipe.top_k, CANDIDATES)
        bm = self.store.bm25(question, k)
        vec = self.store.vectors(self.embed_query(question), k)
        hits = []
        for cid, _, cos in fuse(bm, vec):
            if len(hits) == self.pipe.top_k:
                break
            h = self.store.fetch(cid)
            if h is not None:
                h["score"] = score4(cos)
                hits.append(h)
        text = passages_text(hits)
        doc = {"found": bool(hits)}
        if hits:
            doc.update(source=hits[0]["source"], section=hits[0]["section"],
                       cite="; ".join(h["source"] + (", " + h["section"] if h["section"] else "") for h in hits))
        doc["passages"] = [{"source": h["source"], "section": h["section"], "score": h["score"], "text": h["text"]}
                           for h in hits]
        return doc, text, (time.perf_counter() - t0) * 1e3

    def messages(self, question, text):
        msgs = [{"role": "system", "content": self.pipe.system}] if self.pipe.system else []
        return msgs + [{"role": "user", "content": self.pipe.render(text, question)}]

    def sampling(self):
        return dict(max_tokens=self.pipe.max_tokens, temperature=self.pipe.temperature, repeat_penalty=1.0)

    def generate(self, msgs):
        with self.gen_lock:
            return self.gen.create_chat_completion(messages=msgs, **self.sampling())

    def generate_stream(self, msgs):
        """Chunks of a streamed chat completion; the model is held until the
        last one (or until the consumer closes the generator)."""
        with self.gen_lock:
            yield from self.gen.create_chat_completion(messages=msgs, stream=True, **self.sampling())

    def prompt_ids(self, msgs):
        """The prompt create_chat_completion sends for msgs, and its token
        ids: the formatter Llama builds from the GGUF's template, as its chat
        handler tokenizes it (for the bench's diagnosis of differing answers)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        if self.gen.chat_format != "chat_template.default":
            raise RuntimeError("the generator uses chat format %r, not the GGUF's template" % self.gen.chat_format)
        eos = self.gen.token_eos()
        fmt = Jinja2ChatFormatter(template=self.gen.metadata["tokenizer.chat_template"],
                                  eos_token=self.gen._model.token_get_text(eos),
                                  bos_token=self.gen._model.token_get_text(self.gen.token_bos()),
                                  stop_token_ids=[eos])
        r = fmt(messages=msgs)
        return r.prompt, self.gen.tokenize(r.prompt.encode("utf-8"), add_bos=not r.added_special, special=True)

    def run(self, question, debug=False, until=None):
        """One call of the pipeline, in our /v1/pipelines/NAME reply's shape;
        until = the retrieve stage's name stops before the answer, as ours'
        `until` does."""
        t0 = time.perf_counter()
        doc, text, retrieve_ms = self.retrieve(question)
        t1 = time.perf_counter()
        msgs = self.messages(question, text)
        if until == self.pipe.retrieve["name"]:
            out, usage, status = None, {}, "not_run"
        else:
            res = self.generate(msgs)
            out, usage, status = res["choices"][0]["message"]["content"] or "", res.get("usage") or {}, "ok"
        answer_ms = (time.perf_counter() - t1) * 1e3 if status == "ok" else 0
        reply = {
            "pipeline": self.pipe.name, "intent": None, "confidence": None, "probabilities": None,
            "stages": [
                {"name": self.pipe.retrieve["name"], "kind": "retrieve", "status": "ok", "output": text,
                 "json": doc, "ms": round(retrieve_ms, 1)},
                {"name": self.pipe.generate["name"], "kind": "generate", "status": status, "output": out,
                 "ms": round(answer_ms, 1)},
            ],
            "output": out, "reply": out, "session": None,
            "state": {"intent": None, "slots": {}, "turn": 1}, "awaiting": None,
            "fallback": False, "handoff": None, "done": False,
            "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                      "completion_tokens": usage.get("completion_tokens", 0)},
            "ms": round((time.perf_counter() - t0) * 1e3, 1),
        }
        if debug:
            prompt, ids = self.prompt_ids(msgs)
            reply["debug"] = {"messages": msgs, "prompt": prompt, "prompt_ids": ids}
        return reply


def read_passages(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
