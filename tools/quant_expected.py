#!/usr/bin/env python3
"""Expected outputs of llama-quantize, for tests/test_quantize.c.

Runs the reference llama.cpp (tools/llamacpp.sh; llama.cpp 0c1e57098) and
writes what it produced, so the test can run on a fresh clone without it:

  tests/data/quant/imatrix-*.gguf, imatrix-llama-spm.dat
        llama-imatrix on each tiny fixture over tests/data/english-page.txt
        (built from the vendored source into build/quant-tools/ if missing;
        only with --imatrix or when the files do not exist yet)
  tests/data/quant/expected-files.txt
        for each fixture x TYPE (plain, --pure, --imatrix in both formats):
        the sha256 and size of llama-quantize's whole output file and, in
        output order, every tensor's name, type and data sha256
  tests/data/quant/expected-mix.txt
        for each model shape of synthetic.txt x TYPE (with and without an
        imatrix where that changes the rules): llama-quantize's output order
        and per-tensor types

  tools/quant_expected.py [--files] [--mix] [--imatrix]   (default: files and mix)

Run from anywhere; paths are relative to the repository root (the imatrix
path is stored in the output's metadata, so it must be the one the test uses).
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

QDIR = "tests/data/quant"
FIXTURES = ["tiny-llama-spm", "tiny-phi3", "tiny-llama3"]
TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
         "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16", "BF16", "F32"]
QUANT_TYPES = [t for t in TYPES if t.startswith("Q")]
# file types whose rules look at has_imatrix, or that need one
IMATRIX_MIX_TYPES = ["Q4_0", "Q5_0", "Q2_K_S", "Q4_K_M"]


def llamacpp_bin():
    out = subprocess.run([os.path.join(ROOT, "tools/llamacpp.sh"), "--env"], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("export LLAMACPP_BIN="):
            return line.split("=", 1)[1].strip("'\"")
    sys.exit("quant_expected: tools/llamacpp.sh --env did not give LLAMACPP_BIN")


def llama_imatrix(bin_dir):
    """llama-imatrix is not among the tools llamacpp.sh builds: compile its one
    source file against the libraries that are there."""
    exe = os.path.join(ROOT, "build/quant-tools/llama-imatrix")
    if os.path.exists(exe):
        return exe
    src = os.path.join(ROOT, "build/llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
    common = os.path.join(os.path.dirname(bin_dir), "common")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    subprocess.run(["g++", "-std=c++17", "-O2", "-I" + src + "/include", "-I" + src + "/common",
                    "-I" + src + "/ggml/include", "-I" + src + "/vendor",
                    src + "/tools/imatrix/imatrix.cpp", "-o", exe, "-L" + bin_dir, "-L" + common,
                    "-lllama-common", "-lllama-common-base", "-lllama", "-lggml", "-lggml-base",
                    "-Wl,-rpath," + bin_dir, "-pthread"], check=True)
    return exe


def make_imatrices(bin_dir, force):
    exe = None
    for fx in FIXTURES:
        name = fx.replace("tiny-", "")
        for fmt in (["gguf", "dat"] if fx == "tiny-llama-spm" else ["gguf"]):
            out = f"{QDIR}/imatrix-{name}.{fmt}"
            if os.path.exists(out) and not force:
                continue
            exe = exe or llama_imatrix(bin_dir)
            cmd = [exe, "-m", f"tests/data/{fx}-f16.gguf", "-f", "tests/data/english-page.txt",
                   "-c", "128", "-t", "2", "-o", out]
            if fmt == "dat":
                cmd += ["--output-format", "dat"]
            subprocess.run(cmd, check=True, capture_output=True)
            print("wrote", out)


def quantize(bin_dir, inp, out, qtype, flags):
    cmd = [os.path.join(bin_dir, "llama-quantize")]
    if flags == "pure":
        cmd.append("--pure")
    elif flags == "requantize":
        cmd.append("--allow-requantize")
    elif flags.startswith("imatrix="):
        cmd += ["--imatrix", flags.split("=", 1)[1]]
    cmd += [inp, out, qtype, "2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"quant_expected: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")


def short_hash(b):
    return hashlib.sha256(b).hexdigest()[:32]


def file_cases():
    cases = []
    for fx in FIXTURES:
        name = fx.replace("tiny-", "")
        for t in TYPES:
            cases.append((fx, t, "-"))
        for t in ["Q2_K", "Q4_K_M"]:
            cases.append((fx, t, "pure"))
        for t in QUANT_TYPES + ["Q2_K_S"]:
            cases.append((fx, t, f"imatrix={QDIR}/imatrix-{name}.gguf"))
        if fx == "tiny-llama-spm":
            for t in ["Q4_0", "Q4_1", "Q5_1", "Q3_K_S", "Q4_K_M", "Q6_K"]:
                cases.append((fx, t, f"imatrix={QDIR}/imatrix-{name}.dat"))
    # BF16 / F32 inputs: the F16 fixture converted first (by llama-quantize
    # here, by us in the test: the F16 -> BF16/F32 cases above show the two
    # conversions are the same bytes)
    cases += [("tiny-llama3", "Q4_K_M", "via=BF16"), ("tiny-llama3", "Q2_K", "via=F32"),
              ("tiny-phi3", "Q8_0", "via=BF16"), ("tiny-llama-spm", "Q5_K_S", "via=F32")]
    # quantized inputs: dequantized first (cases name the input file itself)
    cases += [("tiny-llama-spm-Q4_K_M", "F16", "requantize"), ("tiny-llama-spm-Q4_K_M", "Q4_0", "requantize"),
              ("tiny-phi3-Q8_0", "Q4_K_M", "requantize"), ("tiny-llama-spm-Q2_K", "Q6_K", "requantize")]
    return cases


def input_path(case_input):
    """A fixture name means its F16 file; a requantize case names its file."""
    return f"tests/data/{case_input}.gguf" if "-Q" in case_input else f"tests/data/{case_input}-f16.gguf"


def write_files(bin_dir, tmp):
    lines = ["# llama-quantize's outputs (llama.cpp 0c1e57098) for tests/test_quantize.c,",
             "# written by tools/quant_expected.py. Per case: the whole file's sha256 (first",
             "# 128 bits) and size, then each tensor in output order: name, type, data sha256.",
             "# case INPUT TYPE FLAGS SHA SIZE / tensor NAME TYPE SHA; INPUT is tests/data/INPUT-f16.gguf,",
             "# or tests/data/INPUT.gguf for requantize cases. FLAGS: -, pure, requantize, imatrix=FILE,",
             "# via=BF16|F32 (the F16 file converted to that type first, then quantized)"]
    for fx, t, flags in file_cases():
        out = os.path.join(tmp, "out.gguf")
        inp = input_path(fx)
        if flags.startswith("via="):
            inp = os.path.join(tmp, "via.gguf")
            quantize(bin_dir, input_path(fx), inp, flags[4:], "-")
        quantize(bin_dir, inp, out, t, "-" if flags.startswith("via=") else flags)
        data = open(out, "rb").read()
        lines.append(f"case {fx} {t} {flags} {short_hash(data)} {len(data)}")
        r = gguf.GGUFReader(out)
        for ti in r.tensors:
            lines.append(f"tensor {ti.name} {ti.tensor_type.name} {short_hash(ti.data.tobytes())}")
        os.unlink(out)
    path = f"{QDIR}/expected-files.txt"
    open(path, "w").write("\n".join(lines) + "\n")
    print("wrote", path, len(file_cases()), "cases")


def read_synthetic():
    models, cur = [], None
    for raw in open(f"{QDIR}/synthetic.txt"):
        w = raw.split("#", 1)[0].split()
        if not w:
            continue
        if w[0] == "model":
            kv = dict(x.split("=") for x in w[3:])
            cur = {"name": w[1], "arch": w[2], "tensors": [], **{k: int(v) for k, v in kv.items()}}
            models.append(cur)
        elif w[0] == "t":
            cur["tensors"].append((w[1], [int(x) for x in w[2:]]))
    return models


def write_synthetic_gguf(m, path):
    """The same file tests/test_quantize.c builds: F16 for 2-D+ tensors, F32
    for 1-D ones (as converted models have them), all zeros."""
    w = gguf.GGUFWriter(path, m["arch"])
    a = m["arch"]
    w.add_uint32(f"{a}.block_count", m["layers"])
    w.add_uint32(f"{a}.context_length", 4096)
    w.add_uint32(f"{a}.embedding_length", m["tensors"][0][1][0])
    w.add_uint32(f"{a}.feed_forward_length", 256)
    w.add_uint32(f"{a}.attention.head_count", m["head"])
    w.add_uint32(f"{a}.attention.head_count_kv", m["head_kv"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
    if m["expert"]:
        w.add_uint32(f"{a}.expert_count", m["expert"])
        w.add_uint32(f"{a}.expert_used_count", 2)
    for name, ne in m["tensors"]:
        for il in (range(m["layers"]) if "%d" in name else [None]):
            nm = name % il if il is not None else name
            shape = list(reversed(ne))          # numpy order: slowest first
            dt = np.float16 if len(ne) > 1 else np.float32
            w.add_tensor(nm, np.zeros(shape, dtype=dt))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_unit_imatrix(m, path):
    """An imatrix of ones for every weight of the model (only its presence
    matters to the type rules)."""
    w = gguf.GGUFWriter(path, "imatrix")
    w.add_array("imatrix.datasets", ["none"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, ne in m["tensors"]:
        if len(ne) < 2 or not name.endswith("weight"):
            continue
        for il in (range(m["layers"]) if "%d" in name else [None]):
            nm = name % il if il is not None else name
            n_exp = ne[2] if len(ne) > 2 else 1
            w.add_tensor(nm + ".in_sum2", np.ones([n_exp, ne[0]], dtype=np.float32))
            w.add_tensor(nm + ".counts", np.ones([n_exp, 1], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mix(bin_dir, tmp):
    lines = ["# llama-quantize's per-tensor types (llama.cpp 0c1e57098) for the model shapes",
             "# of synthetic.txt, written by tools/quant_expected.py. 'order MODEL names...'",
             "# is its output order; 'mix MODEL TYPE FLAGS types...' the type of each tensor",
             "# in that order (FLAGS: - or imatrix)."]
    for m in read_synthetic():
        src = os.path.join(tmp, m["name"] + "-f16.gguf")
        write_synthetic_gguf(m, src)
        im = os.path.join(tmp, m["name"] + "-imatrix.gguf")
        write_unit_imatrix(m, im)
        order = None
        cases = [(t, "-") for t in TYPES] + [(t, "imatrix") for t in IMATRIX_MIX_TYPES]
        for t, flags in cases:
            out = os.path.join(tmp, "mix.gguf")
            quantize(bin_dir, src, out, t, "-" if flags == "-" else "imatrix=" + im)
            r = gguf.GGUFReader(out)
            names = [ti.name for ti in r.tensors]
            if order is None:
                order = names
                lines.append("order " + m["name"] + " " + " ".join(names))
            assert names == order, "llama-quantize's order changed between types"
            lines.append(f"mix {m['name']} {t} {flags} " + " ".join(ti.tensor_type.name for ti in r.tensors))
            os.unlink(out)
        os.unlink(src)
        os.unlink(im)
        print("mix", m["name"], "done")
    path = f"{QDIR}/expected-mix.txt"
    open(path, "w").write("\n".join(lines) + "\n")
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", action="store_true")
    ap.add_argument("--mix", action="store_true")
    ap.add_argument("--imatrix", action="store_true", help="regenerate the imatrix files too")
    args = ap.parse_args()
    if not args.files and not args.mix:
        args.files = args.mix = True
    os.chdir(ROOT)
    bin_dir = llamacpp_bin()
    make_imatrices(bin_dir, args.imatrix)
    with tempfile.TemporaryDirectory() as tmp:
        if args.files:
            write_files(bin_dir, tmp)
        if args.mix:
            write_mix(bin_dir, tmp)


if __name__ == "__main__":
    main()
