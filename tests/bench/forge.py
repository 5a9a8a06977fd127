#!/usr/bin/env python3
"""Forge the three benchmark models: real shapes and vocabularies, random weights.

The hotline runs TinyLlama-1.1B (Q2_K), Phi-3-mini-4k (Q4_K_M) and
Llama-3-8B (Q5_K_M). We cannot download them, and speed does not depend on
what the weights say, only on their shapes and quantization types. So this
script writes F16 GGUF files with exactly those architectures,
hyper-parameters, tensor names/shapes and tokenizers (copied from the real
vocab GGUFs in ../shared/vocab), fills them with seeded random weights, and
has llama.cpp's own llama-quantize turn them into the files users download.

    tests/bench/forge.py [--models tinyllama,phi3,llama3] [--out models/bench]
                         [--keep-f16] [--seed 1234] [--check]

Idempotent: a model whose quantized file exists and passes a header check is
skipped (`--check` only verifies, never writes). Output lands in
models/bench/ (gitignored); the F16 intermediates are deleted unless
--keep-f16. Needs numpy, the `gguf` package and llama.cpp's tools
(tools/llamacpp.sh; $LLAMACPP_BIN or build/llamacpp/build-*/bin).

Memory: tensors are generated and written in chunks of CHUNK_ELEMS values,
so the 16 GB Llama-3 F16 file never needs more than ~100 MB of RAM.
"""
import argparse
import glob
import os
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.exit("forge: numpy is missing (pip install numpy)")
try:
    import gguf
except ImportError:
    sys.exit("forge: the 'gguf' Python package is missing (pip install gguf)")

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VOCAB_DIR = os.path.join(REPO_ROOT, "..", "shared", "vocab")
CHUNK_ELEMS = 8 * 1024 * 1024   # 32 MB of float32 scratch + 16 MB of f16
WEIGHT_STD = 0.02               # keeps q·k and the residual stream O(1)
NORM_STD = 0.02                 # norm weights are 1 + this * N(0,1)

# TinyLlama-1.1B-Chat-v1.0's tokenizer_config.json template (zephyr style);
# the llama-spm vocab file carries no template of its own.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")

# Hyper-parameters from the models' config.json / their llama.cpp conversions.
MODELS = {
    "tinyllama": dict(
        arch="llama", name="TinyLlama-1.1B-shape",
        file="tinyllama-1.1b-shape", quant="Q2_K", ftype=10,
        vocab="ggml-vocab-llama-spm.gguf", n_vocab=32000,
        dim=2048, n_layer=22, n_head=32, n_head_kv=4, ffn=5632,
        ctx=2048, rope_base=10000.0, eps=1e-5, template=ZEPHYR_TEMPLATE),
    "phi3": dict(
        arch="phi3", name="Phi-3-mini-4k-shape",
        file="phi-3-mini-4k-shape", quant="Q4_K_M", ftype=15,
        vocab="ggml-vocab-phi-3.gguf", n_vocab=32064,
        dim=3072, n_layer=32, n_head=32, n_head_kv=32, ffn=8192,
        ctx=4096, rope_base=10000.0, eps=1e-5, sliding_window=2047),
    "llama3": dict(
        arch="llama", name="Llama-3-8B-shape",
        file="llama-3-8b-shape", quant="Q5_K_M", ftype=17,
        vocab="ggml-vocab-llama-bpe.gguf", n_vocab=128256,
        dim=4096, n_layer=32, n_head=32, n_head_kv=8, ffn=14336,
        ctx=8192, rope_base=500000.0, eps=1e-5),
}


def log(msg):
    print(f"forge: {msg}", flush=True)


def tensor_plan(m):
    """(name, numpy shape [rows, cols], is_norm) in llama.cpp's naming.

    numpy shape is [out, in]; GGUF stores it reversed (ne0 = in), which is
    what GGUFWriter does. Norms are F32 like every real conversion.
    """
    dim, hd = m["dim"], m["dim"] // m["n_head"]
    kv = m["n_head_kv"] * hd
    plan = [("token_embd.weight", (m["n_vocab"], dim), False)]
    for i in range(m["n_layer"]):
        b = f"blk.{i}."
        plan.append((b + "attn_norm.weight", (dim,), True))
        if m["arch"] == "phi3":
            plan.append((b + "attn_qkv.weight", (dim + 2 * kv, dim), False))
        else:
            plan += [(b + "attn_q.weight", (dim, dim), False),
                     (b + "attn_k.weight", (kv, dim), False),
                     (b + "attn_v.weight", (kv, dim), False)]
        plan.append((b + "attn_output.weight", (dim, dim), False))
        plan.append((b + "ffn_norm.weight", (dim,), True))
        if m["arch"] == "phi3":
            # gate and up fused: rows [0, ffn) are gate, [ffn, 2ffn) up.
            plan.append((b + "ffn_up.weight", (2 * m["ffn"], dim), False))
        else:
            plan += [(b + "ffn_gate.weight", (m["ffn"], dim), False),
                     (b + "ffn_up.weight", (m["ffn"], dim), False)]
        plan.append((b + "ffn_down.weight", (dim, m["ffn"]), False))
    plan.append(("output_norm.weight", (dim,), True))
    plan.append(("output.weight", (m["n_vocab"], dim), False))
    return plan


def copy_tokenizer(writer, vocab_path, n_vocab):
    """Copy every tokenizer.* key of the real vocab file, types preserved."""
    reader = gguf.GGUFReader(vocab_path)
    have_template = False
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                # raw bytes: a byte-level BPE token must round-trip exactly
                val = [bytes(field.parts[i]) for i in field.data]
            else:
                val = field.contents()
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                       "tokenizer.ggml.token_type") and len(val) != n_vocab:
                raise SystemExit(f"forge: {vocab_path}: {key} has {len(val)} "
                                 f"entries, the model needs {n_vocab}")
            writer.add_key_value(key, val, vtype, sub_type=sub)
        else:
            writer.add_key_value(key, field.contents(), vtype)
        have_template |= key == "tokenizer.chat_template"
    return have_template


def add_metadata(writer, m, seed):
    """KV pairs in the order convert_hf_to_gguf.py writes them."""
    a = m["arch"]
    writer.add_name(m["name"])
    writer.add_description(
        f"Switchboard benchmark model: the real {m['name'][:-6]} architecture, "
        f"shapes and vocabulary with seeded random weights (seed {seed}). "
        "Not a usable language model.")
    writer.add_uint32(f"{a}.context_length", m["ctx"])
    if a == "phi3":
        writer.add_uint32(f"{a}.rope.scaling.original_context_length", m["ctx"])
    writer.add_uint32(f"{a}.embedding_length", m["dim"])
    writer.add_uint32(f"{a}.feed_forward_length", m["ffn"])
    writer.add_uint32(f"{a}.block_count", m["n_layer"])
    writer.add_uint32(f"{a}.attention.head_count", m["n_head"])
    writer.add_uint32(f"{a}.attention.head_count_kv", m["n_head_kv"])
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", m["eps"])
    writer.add_uint32(f"{a}.rope.dimension_count", m["dim"] // m["n_head"])
    writer.add_float32(f"{a}.rope.freq_base", m["rope_base"])
    writer.add_uint32(f"{a}.vocab_size", m["n_vocab"])
    if "sliding_window" in m:
        writer.add_uint32(f"{a}.attention.sliding_window", m["sliding_window"])
    writer.add_file_type(1)   # MOSTLY_F16
    vocab_path = os.path.join(VOCAB_DIR, m["vocab"])
    if not copy_tokenizer(writer, vocab_path, m["n_vocab"]) and m.get("template"):
        writer.add_string("tokenizer.chat_template", m["template"])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write_tensor(fout, rng, shape, is_norm, scratch32, scratch16):
    """Stream one tensor: generate CHUNK_ELEMS values at a time, write, reuse."""
    total = int(np.prod(shape))
    done = 0
    while done < total:
        n = min(CHUNK_ELEMS, total - done)
        buf = scratch32[:n]
        rng.standard_normal(out=buf, dtype=np.float32)
        if is_norm:
            buf *= NORM_STD
            buf += 1.0
            buf.tofile(fout)
        else:
            buf *= WEIGHT_STD
            out = scratch16[:n]
            out[...] = buf          # float32 -> float16, no new allocation
            out.tofile(fout)
        done += n


def forge_f16(m, path, seed):
    plan = tensor_plan(m)
    writer = gguf.GGUFWriter(path + ".partial", m["arch"])
    add_metadata(writer, m, seed)
    for name, shape, is_norm in plan:
        dtype = np.float32 if is_norm else np.float16
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(name, shape, np.dtype(dtype), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    # GGUFWriter.write_tensor_data wants each tensor whole (1 GB for
    # Llama-3's token_embd), so we write the data section ourselves in the
    # same layout: every tensor starts at a multiple of the alignment.
    fout = writer.fout[0]
    align = writer.data_alignment
    scratch32 = np.empty(CHUNK_ELEMS, dtype=np.float32)
    scratch16 = np.empty(CHUNK_ELEMS, dtype=np.float16)
    t0 = time.time()
    written = 0
    for i, (name, shape, is_norm) in enumerate(plan):
        fout.write(b"\0" * (-fout.tell() % align))
        # one stream per tensor: a tensor's values do not depend on the others
        rng = np.random.default_rng([seed, i])
        write_tensor(fout, rng, shape, is_norm, scratch32, scratch16)
        written += int(np.prod(shape)) * (4 if is_norm else 2)
        if not is_norm:
            dt = max(time.time() - t0, 1e-6)
            log(f"  [{i + 1}/{len(plan)}] {name} {list(shape)} "
                f"{written / 2**20:,.0f} MB, {written / 2**20 / dt:.0f} MB/s")
    fout.write(b"\0" * (-fout.tell() % align))
    writer.close()
    os.rename(path + ".partial", path)
    return time.time() - t0


# Byte sizes of GGUF's scalar value types (gguf spec; STRING=8, ARRAY=9).
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
               10: "Q", 11: "q", 12: "d"}


def read_header(path):
    """Parse a GGUF header without touching the tensor data.

    GGUFReader decodes every array element (400k vocab strings for
    Llama-3: ~20 s here); this skips arrays and returns
    (scalar/string KVs, [(name, type, n_elems, offset)], data_start).
    """
    import mmap
    import struct
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if mm[:4] != b"GGUF":
            raise ValueError("bad magic")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
        pos = 24

        def read_str(p):
            (n,) = struct.unpack_from("<Q", mm, p)
            return mm[p + 8:p + 8 + n].decode("utf-8", "replace"), p + 8 + n

        def skip_value(vtype, p):
            if vtype == 8:
                (n,) = struct.unpack_from("<Q", mm, p)
                return p + 8 + n
            if vtype == 9:
                sub, count = struct.unpack_from("<IQ", mm, p)
                p += 12
                if sub in _SCALAR_SIZE:
                    return p + count * _SCALAR_SIZE[sub]
                for _ in range(count):
                    p = skip_value(sub, p)
                return p
            return p + _SCALAR_SIZE[vtype]

        kv = {}
        for _ in range(n_kv):
            key, pos = read_str(pos)
            (vtype,) = struct.unpack_from("<I", mm, pos)
            pos += 4
            if vtype == 8:
                kv[key], pos = read_str(pos)
            elif vtype in _SCALAR_FMT:
                (kv[key],) = struct.unpack_from("<" + _SCALAR_FMT[vtype], mm, pos)
                pos += _SCALAR_SIZE[vtype]
            else:
                pos = skip_value(vtype, pos)
        tensors = []
        for _ in range(n_tensors):
            name, pos = read_str(pos)
            (n_dims,) = struct.unpack_from("<I", mm, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", mm, pos + 4)
            ttype, offset = struct.unpack_from("<IQ", mm, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            tensors.append((name, ttype, int(np.prod(dims)), offset))
        align = kv.get("general.alignment", 32)
        return kv, tensors, pos + (-pos % align)
    finally:
        mm.close()


def check_file(path, m, want_ftype):
    """Header check: metadata, tensor count and that every tensor's bytes exist.

    Returns an error string, or None when the file is what we would forge.
    """
    try:
        kv, tensors, data_start = read_header(path)
    except Exception as exc:  # truncated files raise struct.error/ValueError
        return f"unreadable header ({exc})"
    a = m["arch"]
    expect = {"general.architecture": a, "general.file_type": want_ftype,
              f"{a}.block_count": m["n_layer"],
              f"{a}.embedding_length": m["dim"],
              f"{a}.attention.head_count_kv": m["n_head_kv"]}
    for key, want in expect.items():
        if kv.get(key) != want:
            return f"{key} is {kv.get(key)!r}, expected {want!r}"
    if len(tensors) != len(tensor_plan(m)):
        return f"{len(tensors)} tensors, expected {len(tensor_plan(m))}"
    end = 0
    for name, ttype, n, offset in tensors:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        end = max(end, data_start + offset + n // block * size)
    if end > os.path.getsize(path):
        return f"truncated: tensor data ends at {end}, file is {os.path.getsize(path)}"
    return None


def type_mix(path):
    mix = {}
    for _, ttype, _, _ in read_header(path)[1]:
        t = gguf.GGMLQuantizationType(ttype).name
        mix[t] = mix.get(t, 0) + 1
    return ", ".join(f"{k}×{v}" for k, v in sorted(mix.items()))


def find_quantize():
    env = os.environ.get("LLAMACPP_BIN")
    cands = [os.path.join(env, "llama-quantize")] if env else []
    cands += sorted(glob.glob(os.path.join(REPO_ROOT, "build", "llamacpp",
                                           "build-*", "bin", "llama-quantize")))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    sys.exit("forge: llama-quantize not found; run tools/llamacpp.sh first "
             "(or set LLAMACPP_BIN)")


def quantize(src, dst, qtype, threads):
    exe = find_quantize()
    logf = dst + ".log"
    log(f"  {os.path.basename(exe)} {os.path.basename(src)} -> "
        f"{os.path.basename(dst)} {qtype} (log: {logf})")
    t0 = time.time()
    with open(logf, "w") as lf:
        rc = subprocess.call([exe, src, dst + ".partial", qtype, str(threads)],
                             stdout=lf, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"forge: llama-quantize failed (exit {rc}); see {logf}")
    os.rename(dst + ".partial", dst)
    return time.time() - t0


def forge_one(key, args):
    m = MODELS[key]
    f16 = os.path.join(args.out, f"{m['file']}.F16.gguf")
    qpath = os.path.join(args.out, f"{m['file']}.{m['quant']}.gguf")
    if os.path.exists(qpath):
        err = check_file(qpath, m, m["ftype"])
        if err is None:
            log(f"{key}: {qpath} ok ({os.path.getsize(qpath) / 2**30:.2f} GiB; "
                f"{type_mix(qpath)})")
            if not args.keep_f16 or os.path.exists(f16):
                return True
        elif args.check:
            log(f"{key}: {qpath}: {err}")
            return False
        else:
            log(f"{key}: {qpath} is bad ({err}); re-forging")
            os.remove(qpath)
    elif args.check:
        log(f"{key}: {qpath} missing")
        return False
    if args.check:
        return True

    if os.path.exists(f16) and check_file(f16, m, 1) is not None:
        log(f"{key}: {f16} is bad ({check_file(f16, m, 1)}); rewriting")
        os.remove(f16)
    if not os.path.exists(f16):
        log(f"{key}: writing {f16}")
        dt = forge_f16(m, f16, args.seed)
        size = os.path.getsize(f16)
        log(f"{key}: F16 {size / 2**30:.2f} GiB in {dt:.0f} s "
            f"({size / 2**20 / dt:.0f} MB/s)")
    if not os.path.exists(qpath):
        dt = quantize(f16, qpath, m["quant"], args.threads)
        err = check_file(qpath, m, m["ftype"])
        if err:
            sys.exit(f"forge: {qpath} after quantizing: {err}")
        log(f"{key}: {m['quant']} {os.path.getsize(qpath) / 2**30:.2f} GiB in "
            f"{dt:.0f} s; {type_mix(qpath)}")
    if not args.keep_f16:
        os.remove(f16)
        log(f"{key}: removed {f16} (use --keep-f16 to keep it)")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tinyllama,phi3,llama3",
                    help="comma-separated subset of: " + ",".join(MODELS))
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "models", "bench"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2,
                    help="llama-quantize threads (the machine has 2 cores)")
    ap.add_argument("--keep-f16", action="store_true",
                    help="keep the F16 intermediates (also forge them if missing)")
    ap.add_argument("--check", action="store_true",
                    help="only verify existing files; exit 1 if any is missing/bad")
    args = ap.parse_args()
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    for k in keys:
        if k not in MODELS:
            sys.exit(f"forge: unknown model {k!r} (known: {', '.join(MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    ok = True
    for k in keys:
        ok &= forge_one(k, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
