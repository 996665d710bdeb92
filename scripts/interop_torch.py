#!/usr/bin/env python3
"""tapegrad <-> PyTorch checkpoint interop, through the safetensors format.

Not needed by CI. Needs PyTorch and NumPy (Debian: apt-get install
python3-torch python3-numpy); the safetensors files are read and written
with the standard library (json, struct) and numpy only, no `safetensors`
package (if that package happens to be installed it is used as a second
opinion).

Commands
  roundtrip [--test-bin PATH] [--keep DIR]
      The full check, both directions, bit for bit:
        1. PyTorch tensors (exact formula values, IEEE specials, random
           normals; f32, f64, a scalar, dotted names) + metadata are written
           to DIR/from_torch.safetensors, and bfloat16 / float16 tensors
           (exact values and specials) to DIR/from_torch_{bf16,f16}.safetensors;
        2. tapegrad loads that file into a model with the same names
           (tests/test_checkpoint.c, case "interop", run with
           TG_INTEROP_DIR=DIR), checks the formula values and the specials'
           bits itself, and saves everything to DIR/from_tapegrad.safetensors;
           tests/test_half.c (case "interop_lowp") loads the 16-bit files
           into float32 tensors (convert_dtype), checks them, and saves them
           converted back (convert_on_save) to from_tapegrad_{bf16,f16};
        3. PyTorch opens tapegrad's file and compares every tensor's bits and
           the metadata with what it wrote.
      --test-bin defaults to build/tests/test_checkpoint (build it first:
        cmake -S . -B build && cmake --build build --target test_checkpoint).
  write FILE
      Only step 1: a PyTorch-written file.
  read FILE
      Opens any safetensors file (e.g. one saved by an example with --save, or
      by tg_ckpt_save) as PyTorch tensors and prints them.

Examples
  /usr/bin/python3 scripts/interop_torch.py roundtrip
  /usr/bin/python3 scripts/interop_torch.py read out/spiral.safetensors
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

# numpy has no bfloat16: 16-bit tensors travel as their bit patterns (<u2 /
# int16) and are viewed as bfloat16 / float16 by torch.
DTYPES = {"F32": (torch.float32, np.dtype("<f4")), "F64": (torch.float64, np.dtype("<f8")),
          "BF16": (torch.bfloat16, np.dtype("<i2")), "F16": (torch.float16, np.dtype("<i2"))}
CODES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16"}


# ---- the format, with the standard library and numpy ------------------------------

def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> torch tensor (float32 or float64). Data in dict
    order, header padded with spaces to a multiple of 8."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        code = CODES[t.dtype]
        t = t.detach().contiguous()
        if t.element_size() == 2:
            t = t.view(torch.int16)
        blob = t.numpy().astype(DTYPES[code][1], copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("duplicate key %r in the header" % k)
        d[k] = v
    return d


def read_safetensors(path):
    """Returns (dict name -> torch tensor, metadata dict), checking the layout
    as tapegrad does (offsets tile the data section exactly)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: truncated file" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError("%s: header length %d beyond the file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    spans, tensors = [], {}
    for name, info in header.items():
        torch_dtype, np_dtype = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if end - begin != count * np_dtype.itemsize or end > len(data):
            raise ValueError("%s: tensor %r: bad data_offsets" % (path, name))
        spans.append((begin, end))
        arr = np.frombuffer(data, dtype=np_dtype, count=count, offset=begin).reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.astype(np_dtype.newbyteorder("="), copy=True))
        if np_dtype.itemsize == 2:
            tensors[name] = tensors[name].view(torch_dtype)
        assert tensors[name].dtype == torch_dtype
    expected = 0
    for begin, end in sorted(spans):
        if begin != expected:
            raise ValueError("%s: offsets overlap or leave a gap at %d" % (path, begin))
        expected = end
    if expected != len(data):
        raise ValueError("%s: %d bytes after the last tensor" % (path, len(data) - expected))
    return tensors, metadata


# ---- the reference tensors -----------------------------------------------------------

def formula(k, shape, dtype):
    """Element i of the k-th formula tensor: (i % 7) * 0.25 - 0.5 + k, exact
    in float32 (tests/test_checkpoint.c, interop_value)."""
    n = math.prod(shape)
    return (torch.arange(n, dtype=torch.float64).remainder(7) * 0.25 - 0.5 + k).to(dtype).reshape(shape)


def reference_tensors():
    g = torch.Generator().manual_seed(1234)
    return {
        "embed.weight": formula(0, (5, 3), torch.float32),
        "blocks.0.norm.gamma": formula(1, (3,), torch.float32),
        "head.weight": formula(2, (2, 3), torch.float64),
        "head.bias": formula(3, (2,), torch.float64),
        # -0.0, inf, -inf, NaN, the smallest subnormal: checked by bits in C
        "specials": torch.tensor([-0.0, math.inf, -math.inf, math.nan, 1.401298464324817e-45], dtype=torch.float32),
        "noise": torch.randn(4, 4, generator=g, dtype=torch.float32),
        "noise64": torch.randn(3, 2, generator=g, dtype=torch.float64),
        "scalar": torch.tensor(3.25, dtype=torch.float64),
    }


def lowp_tensors(dtype):
    """The 16-bit files: "formula" (exact in bfloat16 and float16) and the
    specials -0.0, inf, -inf, NaN, the format's smallest subnormal and (for
    float16) its largest finite value (tests/test_half.c, interop_lowp)."""
    tiny, big = (2.0 ** -133, 1.0) if dtype == torch.bfloat16 else (2.0 ** -24, 65504.0)
    return {
        "formula": formula(0, (3, 5), dtype),
        "specials": torch.tensor([-0.0, math.inf, -math.inf, math.nan, tiny, big], dtype=torch.float32).to(dtype),
    }


def bits(t):
    return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def compare(got, ref, problems, what):
    if set(got) != set(ref):
        problems.append("%s: names differ: %s vs %s" % (what, sorted(got), sorted(ref)))
    for name, t in ref.items():
        if name not in got:
            continue
        g = got[name]
        if g.dtype != t.dtype or g.shape != t.shape:
            problems.append("%s: %s: %s %s vs %s %s" % (what, name, g.dtype, tuple(g.shape), t.dtype, tuple(t.shape)))
        elif not torch.equal(bits(g), bits(t)):
            nan = torch.isnan(t.float())  # a NaN's payload may differ: compare where it is
            if not (torch.equal(nan, torch.isnan(g.float())) and torch.equal(bits(g)[~nan], bits(t)[~nan])):
                problems.append("%s: %s: values differ" % (what, name))


# ---- commands -------------------------------------------------------------------------

def cmd_write(path):
    write_safetensors(path, reference_tensors(), {"source": "torch", "torch_version": torch.__version__})
    print("wrote %s" % path)


def cmd_read(path):
    tensors, metadata = read_safetensors(path)
    print("%s: %d tensors, metadata %s" % (path, len(tensors), json.dumps(metadata, ensure_ascii=False)))
    for name, t in tensors.items():
        print("%s %s %s" % (name, str(t.dtype).replace("torch.", ""), tuple(t.shape)))
        print(t)


def cmd_roundtrip(test_bin, keep):
    if not os.access(test_bin, os.X_OK):
        sys.exit("interop: %s is not an executable; build it with\n"
                 "  cmake -S . -B build && cmake --build build --target test_checkpoint\n"
                 "or pass --test-bin" % test_bin)
    work = keep or tempfile.mkdtemp(prefix="tg-interop-")
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "from_torch.safetensors")
    dst = os.path.join(work, "from_tapegrad.safetensors")
    if os.path.exists(dst):
        os.remove(dst)
    ref = reference_tensors()
    write_safetensors(src, ref, {"source": "torch", "torch_version": torch.__version__})
    print("1. PyTorch wrote %s (%d tensors)" % (src, len(ref)))

    lowp = {"bf16": lowp_tensors(torch.bfloat16), "f16": lowp_tensors(torch.float16)}
    for tag, tensors in lowp.items():
        write_safetensors(os.path.join(work, "from_torch_%s.safetensors" % tag), tensors, {"source": "torch"})
    print("   and %d tensors each in bfloat16 and float16 to from_torch_{bf16,f16}.safetensors" % len(lowp["bf16"]))

    runs = [(test_bin, "interop"), (os.path.join(os.path.dirname(test_bin), "test_half"), "interop_lowp")]
    for binary, case in runs:
        env = dict(os.environ, TG_INTEROP_DIR=work, CK_RUN_CASE=case)
        run = subprocess.run([binary], env=env, capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        if run.returncode != 0 or "100%: Checks: 1," not in run.stdout:
            sys.exit("interop: tapegrad (%s) failed to load the PyTorch file (exit status %d)" %
                     (os.path.basename(binary), run.returncode))
    print("2. tapegrad loaded them (the 16-bit files into float32, converted), checked the values and wrote %s "
          "and from_tapegrad_{bf16,f16}.safetensors (converted back)" % dst)

    got, metadata = read_safetensors(dst)
    problems = []
    compare(got, ref, problems, "from_tapegrad")
    if metadata.get("source") != "torch" or metadata.get("written_by") != "tapegrad":
        problems.append("metadata: %r" % metadata)
    for tag, tensors in lowp.items():
        g, m = read_safetensors(os.path.join(work, "from_tapegrad_%s.safetensors" % tag))
        compare(g, tensors, problems, "from_tapegrad_%s" % tag)
        if m.get("written_by") != "tapegrad":
            problems.append("from_tapegrad_%s metadata: %r" % (tag, m))
    try:  # a second opinion, when the reference reader is installed
        from safetensors.torch import load_file
        other = load_file(dst)
        for name, t in ref.items():
            if not torch.equal(bits(other[name]), bits(t)):
                problems.append("%s: differs when read by the safetensors package" % name)
        print("   (also read back with the safetensors package)")
    except ImportError:
        pass
    if problems:
        sys.exit("interop: FAILED\n  " + "\n  ".join(problems))
    print("3. PyTorch read it back: %d tensors identical bit for bit, metadata %s; the bfloat16 and float16 "
          "files identical bit for bit (NaN by position)" % (len(ref), json.dumps(metadata, ensure_ascii=False)))
    if not keep:
        for tag in lowp:
            for p in ("from_torch_%s.safetensors" % tag, "from_tapegrad_%s.safetensors" % tag):
                os.remove(os.path.join(work, p))
        for p in (src, dst):
            os.remove(p)
        os.rmdir(work)
    print("interop: OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("roundtrip", help="PyTorch -> tapegrad -> PyTorch, bit for bit")
    r.add_argument("--test-bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                      "tests", "test_checkpoint"))
    r.add_argument("--keep", metavar="DIR", help="work in DIR and keep the files")
    w = sub.add_parser("write", help="write the PyTorch reference file")
    w.add_argument("file")
    rd = sub.add_parser("read", help="print a safetensors file as PyTorch tensors")
    rd.add_argument("file")
    a = ap.parse_args()
    if a.cmd == "roundtrip":
        cmd_roundtrip(os.path.normpath(a.test_bin), a.keep)
    elif a.cmd == "write":
        cmd_write(a.file)
    else:
        cmd_read(a.file)


if __name__ == "__main__":
    main()
