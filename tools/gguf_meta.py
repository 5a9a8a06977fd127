#!/usr/bin/env python3
"""Print the metadata of a GGUF file with the reference `gguf` package.

Used by tools/models.sh to show what a model is (architecture, tensor types,
tokenizer, chat template) and to prove the file is complete: GGUFReader maps
every tensor, so a truncated or mis-assembled file fails here.

    tools/gguf_meta.py FILE [--template]
"""
import collections
import sys

try:
    import gguf
except ImportError:
    sys.exit("gguf_meta: the 'gguf' Python package is missing (pip install gguf)")


def field_value(field):
    """Decode a scalar or string field; arrays are summarised by length."""
    kind = field.types[0] if field.types else None
    if kind == gguf.GGUFValueType.ARRAY:
        return f"[array of {len(field.data)}]"
    if kind == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    return field.parts[field.data[0]].tolist()[0]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    show_template = "--template" in sys.argv[2:]
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises plain ValueError/OSError etc.
        sys.exit(f"gguf_meta: {path}: not a complete GGUF file: {exc}")

    fields = reader.fields
    def get(key, default="(absent)"):
        return field_value(fields[key]) if key in fields else default

    arch = get("general.architecture")
    print(f"file:           {path}")
    print(f"name:           {get('general.name')}")
    print(f"architecture:   {arch}")
    for key in ("block_count", "embedding_length", "feed_forward_length",
                "attention.head_count", "attention.head_count_kv",
                "context_length", "rope.freq_base"):
        print(f"{arch}.{key}: {get(f'{arch}.{key}')}")
    file_type = get("general.file_type", None)
    if file_type is not None:
        try:
            file_type = f"{file_type} ({gguf.LlamaFileType(file_type).name})"
        except ValueError:
            pass
    print(f"file_type:      {file_type}")
    print(f"vocab:          model={get('tokenizer.ggml.model')} "
          f"pre={get('tokenizer.ggml.pre')} "
          f"tokens={len(fields['tokenizer.ggml.tokens'].data) if 'tokenizer.ggml.tokens' in fields else 0} "
          f"bos={get('tokenizer.ggml.bos_token_id')} eos={get('tokenizer.ggml.eos_token_id')} "
          f"add_bos={get('tokenizer.ggml.add_bos_token')}")

    counts = collections.Counter(t.tensor_type.name for t in reader.tensors)
    total = sum(int(t.n_bytes) for t in reader.tensors)
    print(f"tensors:        {len(reader.tensors)}, {total / 2**20:.1f} MiB of data")
    print("tensor types:   " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    interesting = ("token_embd.weight", "output.weight", "blk.0.attn_q.weight",
                   "blk.0.attn_v.weight", "blk.0.ffn_down.weight", "blk.0.attn_qkv.weight")
    for t in reader.tensors:
        if t.name in interesting:
            print(f"  {t.name:24s} {t.tensor_type.name:6s} {list(map(int, t.shape))}")

    template = get("tokenizer.chat_template", "")
    if show_template:
        print("chat template:\n" + template)
    else:
        first = template.replace("\n", "\\n")[:160]
        print(f"chat template:  {len(template)} chars: {first}...")


if __name__ == "__main__":
    main()
