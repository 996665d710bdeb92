#!/usr/bin/env python3
"""Writes the seed corpus of the checkpoint-loader fuzzer (tests/fuzz/corpus/).

Standard library only. Three kinds of files, by name prefix:
  valid-*  load into the fuzz target's model: params "a.w" F32 (2,) and
           "b" F64 (1,), optionally with the state list "opt.step" F64 ()
  parse-*  well-formed safetensors files that do not fit that model
  bad-*    files the parser must refuse
tests/test_checkpoint.c (case "corpus") checks every file keeps its promise,
so the corpus stays honest without clang.

Run from anywhere:  python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

B = '"b":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}'
A = '"a.w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}'
S = '"opt.step":{"dtype":"F64","shape":[],"data_offsets":[16,24]}'
DATA16 = struct.pack("<d", 1.5) + struct.pack("<2f", -2.0, 0.25)
DATA24 = DATA16 + struct.pack("<d", 12.0)


def raw(header, data=b"", n=None):
    """Length field (n, or the header's length), header text, data."""
    h = header.encode("utf-8") if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def padded(header, data=b""):
    """As tapegrad and the reference writer do: header padded with spaces to 8."""
    h = header.encode("utf-8")
    h += b" " * (-len(h) % 8)
    return raw(h, data)


def st(tensors, meta=None):
    """A well-formed file from [(name, dtype, shape, bytes)], laid out in order."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return padded(json.dumps(header, separators=(",", ":")), data)


FILES = {
    # loads into the fuzz model
    "valid-min": raw("{" + B + "," + A + "}", DATA16),
    "valid-padded": padded("{" + A + "," + B + "}", DATA16),
    "valid-meta": padded('{"__metadata__":{"format":"pt","step":"12","note":"caf\\u00e9 \\"q\\""},' + B + "," + A + "}",
                         DATA16),
    "valid-state": padded("{" + B + "," + A + "," + S + "}", DATA24),
    "valid-whitespace": raw('{ \n\t"b" : { "dtype" : "F64" , "shape" : [ 1 ] , "data_offsets" : [ 0 , 8 ] } ,\r\n '
                            + A + " }\n", DATA16),
    "valid-specials": raw("{" + B + "," + A + "}", struct.pack("<d", float("nan")) + struct.pack("<2f", float("inf"), -0.0)),
    # well-formed, but not the fuzz model
    "parse-empty": padded("{}"),
    "parse-empty-meta": padded('{"__metadata__":{}}'),
    "parse-scalar-zero-size": st([("s", "F64", [], struct.pack("<d", 3.25)), ("z", "F32", [0, 3], b""),
                                  ("z2", "F64", [4, 0], b"")]),
    "parse-eight-dims": st([("t", "F32", [1, 2, 1, 1, 2, 1, 1, 1], struct.pack("<4f", 1, 2, 3, 4))]),
    "parse-names": st([("layers.0.attn.q_proj.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                       ("na\u00efve.\u20ac.\U0001F600", "F64", [1], struct.pack("<d", 1)),
                       ("quote\"back\\slash\nnl", "F32", [1], struct.pack("<f", 1))],
                      meta={"k\u00e9y": "v\u00e4lue", "": "empty key"}),
    "parse-many": st([("p%d" % i, "F32" if i % 3 else "F64", [i % 4 + 1], b"\x01" * ((i % 4 + 1) * (4 if i % 3 else 8)))
                      for i in range(40)]),
    "parse-extra": padded("{" + B + "," + A + ',"c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}',
                          DATA16 + b"\0\0\0\0"),
    "parse-shape-mismatch": padded('{' + B + ',"a.w":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}}', DATA16),
    "parse-dtype-mismatch": padded('{"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' + A + "}", DATA16),
    "parse-missing": padded("{" + B + "}", DATA16[:8]),
    # refused by the parser
    "bad-empty": b"",
    "bad-short": b"\x02\0\0\0\0",
    "bad-length-beyond": raw("{}", n=1000),
    "bad-length-max": raw("{}", n=2**64 - 1),
    "bad-zero-length": raw(""),
    "bad-truncated-header": raw("{" + B + "," + A + "}", DATA16)[:60],
    "bad-truncated-data": raw("{" + B + "," + A + "}", DATA16)[:-3],
    "bad-json": raw("{" + B + ",", DATA16),
    "bad-trailing-comma": raw("{" + B + "," + A + ",}", DATA16),
    "bad-not-object": raw("[1,2]"),
    "bad-duplicate": raw("{" + B + "," + A + "," + B + "}", DATA16),
    "bad-duplicate-escaped": raw('{"b":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"\\u0062":1}', DATA16[:8]),
    "bad-duplicate-field": raw('{"b":{"dtype":"F64","dtype":"F64","shape":[1],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-dtype-unknown": raw('{"b":{"dtype":"F23","shape":[1],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-dtype-unsupported": raw('{"b":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-size-span": raw('{"b":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-out-of-range": raw("{" + B + "," + A + "}", DATA16[:12]),
    "bad-overlap": raw('{' + B + ',"a.w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', DATA16),
    "bad-gap": raw('{' + B + ',"a.w":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}', DATA16 + b"\0" * 4),
    "bad-trailing-data": raw("{" + B + "," + A + "}", DATA16 + b"junk"),
    "bad-end-before-begin": raw('{' + B + ',"a.w":{"dtype":"F32","shape":[2],"data_offsets":[16,8]}}', DATA16),
    "bad-negative-shape": raw('{"b":{"dtype":"F64","shape":[-1],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-nine-dims": raw('{"b":{"dtype":"F64","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-overflow": raw('{"b":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}', DATA16[:8]),
    "bad-offsets-huge": raw('{"b":{"dtype":"F64","shape":[1],"data_offsets":[18446744073709551608,18446744073709551616]}}',
                            DATA16[:8]),
    "bad-unexpected-field": raw('{"b":{"dtype":"F64","shape":[1],"data_offsets":[0,8],"x":0}}', DATA16[:8]),
    "bad-missing-field": raw('{"b":{"dtype":"F64","shape":[1]}}', DATA16[:8]),
    "bad-meta-number": raw('{"__metadata__":{"k":1},' + B + "}", DATA16[:8]),
    "bad-meta-nul": raw('{"__metadata__":{"k":"a\\u0000"},' + B + "}", DATA16[:8]),
    "bad-utf8": raw(b'{"\xc3\x28":1}'),
    "bad-surrogate": raw('{"\\ud800":1}'),
    "bad-deep": raw('{"__metadata__":' + "[" * 20 + "]" * 20 + "}"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    for name, data in sorted(FILES.items()):
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print("wrote %d files to %s" % (len(FILES), OUT))


if __name__ == "__main__":
    main()
