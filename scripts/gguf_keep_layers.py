#!/usr/bin/env python3
"""Writes a GGUF model cut to its first N transformer blocks (standard library only).

Why: the accelerator machine receives at most 64 MiB with the working tree, and SmolLM2-135M's
GGUF (94 MB) does not fit. Its first few blocks, with the real embedding, tokenizer and output
norm, do: the CPU-vs-GPU agreement benchmark then runs on real weights (docs/CUDA.md says which
figures come from such a cut model). The output is a valid llama-architecture GGUF whose
`<arch>.block_count` is N; every `blk.<i>.` tensor with i >= N is dropped, every other tensor is
copied byte for byte.

Usage: gguf_keep_layers.py INPUT OUTPUT --layers N
Exit status: 0 written; 2 a bad argument or input file (the message names the file); nothing is
written then.
"""
import argparse
import os
import struct
import sys

# GGUF metadata value types -> struct format of a scalar (8 = string, 9 = array).
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
MAX_HEADER_BYTES = 64 << 20  # metadata and tensor infos larger than this are refused
MAX_FILE_BYTES = 64 << 30    # the whole file is read into memory: refuse anything larger


class InputError(Exception):
    """A malformed input or argument: reported in one line, exit status 2."""


def fail(message):
    raise InputError(message)


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            fail(f"truncated file at byte {self.pos}")
        value = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value if len(value) > 1 else value[0]

    def string(self):
        n = self.take("Q")
        if n > MAX_HEADER_BYTES:
            fail(f"a string of {n} bytes at byte {self.pos}")
        if self.pos + n > len(self.data):
            fail(f"a string of {n} bytes at byte {self.pos} runs past the end of the file")
        try:
            s = self.data[self.pos:self.pos + n].decode("utf-8")
        except UnicodeDecodeError:
            fail(f"a string at byte {self.pos} is not UTF-8")
        self.pos += n
        return s

    def skip_value(self, vtype):
        if vtype == 8:
            self.string()
        elif vtype == 9:
            item_type, count = self.take("I"), self.take("Q")
            if item_type in SCALAR:
                size = struct.calcsize("<" + SCALAR[item_type]) * count
                if self.pos + size > len(self.data):
                    fail("array runs past the end of the file")
                self.pos += size
            else:
                for _ in range(count):
                    self.skip_value(item_type)
        elif vtype in SCALAR:
            self.take(SCALAR[vtype])
        else:
            fail(f"unknown metadata type {vtype} at byte {self.pos}")


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def cut(args):
    if not os.path.isfile(args.input):
        fail("not a regular file")
    if os.path.getsize(args.input) > MAX_FILE_BYTES:
        fail(f"larger than {MAX_FILE_BYTES >> 30} GiB")
    with open(args.input, "rb") as f:
        data = f.read()
    r = Reader(data)
    magic, version = r.take("4s"), r.take("I")
    if magic != b"GGUF" or version not in (2, 3):
        fail("not a GGUF v2/v3 file")
    n_tensors, n_kv = r.take("Q"), r.take("Q")

    kvs, arch, blocks, alignment = [], None, None, 32
    for _ in range(n_kv):
        start = r.pos
        key = r.string()
        vtype = r.take("I")
        value_at = r.pos
        r.skip_value(vtype)
        raw = data[start:r.pos]
        if key == "general.architecture" and vtype == 8:
            arch = Reader(data[value_at:r.pos]).string()
        if key == "general.alignment" and vtype == 4:
            alignment = struct.unpack_from("<I", data, value_at)[0]
        kvs.append((key, vtype, value_at, raw))
    if arch is None:
        fail("no general.architecture")

    out_kv = []
    for key, vtype, value_at, raw in kvs:
        if key == f"{arch}.block_count":
            blocks = struct.unpack_from("<" + SCALAR[vtype], data, value_at)[0]
            raw = gguf_string(key) + struct.pack("<I", vtype) + struct.pack("<" + SCALAR[vtype], args.layers)
        elif key == "general.name" and vtype == 8:
            name = Reader(data[value_at:value_at + 8 + struct.unpack_from("<Q", data, value_at)[0]]).string()
            raw = gguf_string(key) + struct.pack("<I", 8) + gguf_string(f"{name} (first {args.layers} blocks)")
        out_kv.append(raw)
    if blocks is None:
        fail(f"no {arch}.block_count")
    if not 1 <= args.layers <= blocks:
        fail(f"--layers {args.layers}: the model has {blocks} blocks (1 to {blocks})")

    tensors = []  # (name, info bytes without offset, offset)
    for _ in range(n_tensors):
        start = r.pos
        name = r.string()
        n_dims = r.take("I")
        if n_dims > 8:
            fail(f"tensor {name}: {n_dims} dimensions")
        r.take("Q" * n_dims) if n_dims else None
        r.take("I")
        info = data[start:r.pos]
        offset = r.take("Q")
        tensors.append((name, info, offset))
    if alignment < 1:
        fail("general.alignment is 0")
    data_start = (r.pos + alignment - 1) // alignment * alignment
    offsets = sorted(t[2] for t in tensors)
    if len(set(offsets)) != len(offsets):
        fail("two tensors share one data offset")
    ends = offsets + [len(data) - data_start]
    if ends[-1] < 0 or any(b < a for a, b in zip(ends, ends[1:])):
        fail("a tensor's data lies past the end of the file")
    size_of = {off: ends[i + 1] - off for i, off in enumerate(ends[:-1])}

    def kept(name):
        if not name.startswith("blk."):
            return True
        block = name.split(".")[1]
        if not block.isdigit():
            fail(f"tensor {name}: no block number")
        return int(block) < args.layers

    chosen = [t for t in tensors if kept(t[0])]
    header = b"GGUF" + struct.pack("<IQQ", version, len(chosen), len(out_kv)) + b"".join(out_kv)
    infos, body, at = [], [], 0
    for name, info, offset in sorted(chosen, key=lambda t: t[2]):
        size = size_of[offset]
        infos.append(info + struct.pack("<Q", at))
        body.append(data[data_start + offset:data_start + offset + size])
        at += size
    head = header + b"".join(infos)
    head += b"\0" * ((-len(head)) % alignment)
    with open(args.output, "wb") as f:
        f.write(head)
        for chunk in body:
            f.write(chunk)
    print(f"gguf_keep_layers: {args.output}: {args.layers} of {blocks} blocks, {len(chosen)} of {n_tensors} tensors, "
          f"{os.path.getsize(args.output) / 2**20:.1f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])  # usage errors: exit 2
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--layers", type=int, required=True)
    args = ap.parse_args()
    try:
        cut(args)
    except InputError as e:
        print(f"gguf_keep_layers: {args.input}: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
