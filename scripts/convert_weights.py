#!/usr/bin/env python3
"""PyTorch checkpoints <-> the safetensors files tapegrad's tg_gpt_import and
tg_gpt_export read and write (docs/weights.md).

tapegrad reads safetensors, not pickles. This script turns the pickles
PyTorch users have into safetensors files with the same tensor names, and
back:

  to-safetensors IN OUT
      IN: a torch.save'd state dict or checkpoint: nanoGPT's ckpt.pt (the
      dict under "model"), Meta's consolidated.00.pth, Hugging Face's
      pytorch_model.bin, or a dict under "state_dict" / "model_state_dict".
      The prefixes torch.compile and DistributedDataParallel add
      ("_orig_mod.", "module.") are removed; tensors of other dtypes than
      float32, float64, bfloat16 and float16 (integer or bool buffers, which
      tapegrad's reader refuses) are left out and listed; tied tensors are
      written once under each name. OUT gets {"format": "pt"} metadata.
  to-torch IN OUT
      IN: a safetensors file (e.g. tg_gpt_export's); OUT: its tensors as a
      torch.save'd dict, for torch.load and load_state_dict.

Pickles can run code when loaded: IN is loaded with weights_only=True, which
refuses anything but tensors and plain containers; --trust-pickle loads a
file you trust that holds other objects.

Needs PyTorch and NumPy (Debian: apt-get install python3-torch python3-numpy).
Examples
  /usr/bin/python3 scripts/convert_weights.py to-safetensors out/ckpt.pt nanogpt.safetensors
  /usr/bin/python3 scripts/convert_weights.py to-torch gpt2.safetensors gpt2.pt
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_torch import read_safetensors, write_safetensors  # noqa: E402

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
PREFIXES = ("_orig_mod.", "module.")


def state_dict_of(obj):
    """The dict of tensors inside a loaded checkpoint."""
    for key in ("model", "state_dict", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return obj[key]
    if isinstance(obj, dict) and obj and all(torch.is_tensor(v) for v in obj.values()):
        return obj
    raise SystemExit("no state dict found: neither a dict of tensors nor one under \"model\", \"state_dict\" or "
                     "\"model_state_dict\"")


def clean(sd):
    """Names without the compile / DDP prefixes; float tensors only.
    Returns (tensors, the names left out with their dtypes)."""
    out, dropped = {}, []
    for name, t in sd.items():
        for p in PREFIXES:
            while name.startswith(p):
                name = name[len(p):]
        if not torch.is_tensor(t) or t.dtype not in FLOATS:
            dropped.append((name, getattr(t, "dtype", type(t).__name__)))
            continue
        if name in out:
            raise SystemExit("two tensors named %r once the prefixes are removed" % name)
        out[name] = t.detach().cpu().contiguous()
    return out, dropped


def to_safetensors(src, dst, trust_pickle=False):
    obj = torch.load(src, map_location="cpu", weights_only=not trust_pickle)
    tensors, dropped = clean(state_dict_of(obj))
    write_safetensors(dst, tensors, {"format": "pt"})
    for name, dtype in dropped:
        print("left out %s (%s)" % (name, dtype))
    return tensors


def to_torch(src, dst):
    tensors, _ = read_safetensors(src)
    torch.save(tensors, dst)
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-safetensors", help="a torch.save'd checkpoint to safetensors")
    a.add_argument("src")
    a.add_argument("dst")
    a.add_argument("--trust-pickle", action="store_true", help="load objects other than tensors (runs pickle code)")
    b = sub.add_parser("to-torch", help="a safetensors file to a torch.save'd dict")
    b.add_argument("src")
    b.add_argument("dst")
    args = ap.parse_args()
    if args.cmd == "to-safetensors":
        t = to_safetensors(args.src, args.dst, args.trust_pickle)
    else:
        t = to_torch(args.src, args.dst)
    print("wrote %s: %d tensors" % (args.dst, len(t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
