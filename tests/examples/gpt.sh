#!/usr/bin/env bash
# examples/gpt in small configurations (a few seconds in all), on a text
# made here so the fortunes need not be installed:
#   learns   both archs: the loss falls, text is sampled, the plot is real
#   same     the same seed gives bitwise the same losses with 1 and 2 threads
#   resume   N steps straight == N/2, --save, --resume N/2 more: the same
#            losses and the same checkpoint, byte for byte
#   errors   bad flags exit 2 naming the values (heads not dividing
#            channels, a batch of zero, an odd head size with RoPE, an
#            unknown arch), a checkpoint of another architecture exits 2,
#            a --data file with non-text bytes or fewer bytes than a window
#            is refused naming them; none of them writes anything
#   generate --prompt and --tokens at the end of a run and from --load:
#            temperature 0 and top-k 1 give the same (greedy) text, the
#            same --seed the same text, another seed another; bad
#            sampling flags (top-p outside (0, 1], a negative temperature,
#            a prompt longer than the context) exit 2 naming them
#   checkpoint  --checkpoint-activations gives bitwise the same losses and
#            checkpoint, both archs
# Usage: gpt.sh BUILD_DIR CASE
set -euo pipefail
gpt=$(cd "$1" && pwd)/examples/gpt
case_name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
first_loss() { awk '!/^#/ {print $2; exit}' "$1"; }
last_loss() { awk '!/^#/ {v = $2} END {print v}' "$1"; }
expect() { # STATUS LOG CMD...
  local want=$1 log=$2 rc=0; shift 2
  "$@" > "$log" 2>&1 || rc=$?
  if grep -q "Sanitizer" "$log"; then cat "$log" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$rc" -eq "$want" ] || { cat "$log" >&2; fail "$*: exit status $rc, want $want"; }
}
# a text of 40 KB: a few sentences over and over, with numbers
for i in $(seq 1 400); do
  echo "The cat sat on the mat, number $((i % 17)). A dog ran after it."
  echo "%"
done > "$tmp/text.txt"
small=(--data "$tmp/text.txt" --layers 1 --heads 2 --channels 16 --context 16 --batch 4 --every 10 --eval-every 10)

case $case_name in
learns)
  for arch in llama gpt2; do
    expect 0 "$tmp/$arch.log" "$gpt" "${small[@]}" --arch "$arch" --steps 60 --lr 1e-2 --sample 40 --out "$tmp/$arch"
    a=$(first_loss "$tmp/$arch/train.dat") b=$(last_loss "$tmp/$arch/train.dat")
    echo "$arch: loss $a -> $b"
    awk -v a="$a" -v b="$b" 'BEGIN {exit !(b < 0.6 * a)}' || fail "$arch: the loss did not fall enough ($a -> $b)"
    grep -q "^sampled text" "$tmp/$arch.log" || fail "$arch: no sample"
    grep -q "arch=$arch layers=1 heads=2 channels=16 context=16" "$tmp/$arch.log" || fail "$arch: no summary"
    grep -q "tokens/s" "$tmp/$arch.log" || fail "$arch: no tokens/s"
    if grep -q "^wrote .*loss.png" "$tmp/$arch.log"; then
      [ "$(head -c 4 "$tmp/$arch/loss.png" | od -An -tx1 | tr -d ' \n')" = "89504e47" ] || fail "loss.png is not a PNG"
    fi
  done
  ;;
same)
  for arch in llama gpt2; do
    "$gpt" "${small[@]}" --arch "$arch" --steps 12 --sample 0 --threads 1 --out "$tmp/t1" > /dev/null
    "$gpt" "${small[@]}" --arch "$arch" --steps 12 --sample 0 --threads 2 --out "$tmp/t2" > /dev/null 2>&1
    cmp "$tmp/t1/train.dat" "$tmp/t2/train.dat" || fail "$arch: 1 and 2 threads give different losses"
  done
  ;;
resume)
  for arch in llama gpt2; do
    "$gpt" "${small[@]}" --arch "$arch" --steps 20 --sample 0 --save "$tmp/full.st" --out "$tmp/a" > /dev/null
    "$gpt" "${small[@]}" --arch "$arch" --steps 20 --stop-after 10 --sample 0 --save "$tmp/half.st" --out "$tmp/b" > /dev/null
    "$gpt" "${small[@]}" --arch "$arch" --steps 20 --sample 0 --resume "$tmp/half.st" --save "$tmp/resumed.st" \
      --out "$tmp/b" > "$tmp/c.log"
    grep -q "resumed from .* at step 10" "$tmp/c.log" || fail "$arch: did not resume at step 10"
    cmp "$tmp/full.st" "$tmp/resumed.st" || fail "$arch: the resumed checkpoint differs from the straight run's"
    cmp "$tmp/a/train.dat" "$tmp/b/train.dat" || fail "$arch: the resumed losses differ from the straight run's"
  done
  ;;
errors)
  mkdir "$tmp/out"
  "$gpt" "${small[@]}" --steps 2 --sample 0 --save "$tmp/llama.st" --out "$tmp/out/keep" > /dev/null
  cp "$tmp/llama.st" "$tmp/llama.copy"
  check2() { # LOG-NAME, expected text, flags...
    local name=$1 text=$2; shift 2
    expect 2 "$tmp/$name.log" "$gpt" "$@" --out "$tmp/out/$name" --save "$tmp/llama.st"
    grep -qF -- "$text" "$tmp/$name.log" || { cat "$tmp/$name.log" >&2; fail "$name: the message lacks '$text'"; }
    [ ! -e "$tmp/out/$name" ] || fail "$name: wrote $tmp/out/$name"
  }
  check2 heads "--heads 3 does not divide --channels 16" "${small[@]}" --heads 3
  check2 batch "--batch 0 must be >= 1" "${small[@]}" --batch 0
  check2 rope "RoPE needs an even head size: --channels 18 / --heads 2 = 9" "${small[@]}" --channels 18
  check2 arch "bad value for '--arch': gpt3" "${small[@]}" --arch gpt3
  check2 other "holds a model with arch=llama" "${small[@]}" --arch gpt2 --steps 4 --resume "$tmp/llama.st"
  check2 wider "these flags make arch=llama layers=1 heads=2 channels=32" "${small[@]}" --channels 32 --steps 4 \
    --resume "$tmp/llama.st"
  printf 'The cat sat on the mat.\001\n' > "$tmp/bin.txt"
  expect 1 "$tmp/bin.log" "$gpt" "${small[@]}" --data "$tmp/bin.txt" --out "$tmp/out/bin"
  grep -qF "a byte that is not text: 0x01 at offset 23" "$tmp/bin.log" || fail "non-text: $(cat "$tmp/bin.log")"
  head -c 300 "$tmp/text.txt" > "$tmp/short.txt"
  expect 1 "$tmp/short.log" "$gpt" "${small[@]}" --data "$tmp/short.txt" --context 64 --out "$tmp/out/short"
  grep -qF "holds 300 bytes" "$tmp/short.log" || fail "short: $(cat "$tmp/short.log")"
  grep -qF -- "--context + 1 = 65" "$tmp/short.log" || fail "short: $(cat "$tmp/short.log")"
  [ ! -e "$tmp/out/bin" ] && [ ! -e "$tmp/out/short" ] || fail "a refused --data wrote its output folder"
  cmp "$tmp/llama.st" "$tmp/llama.copy" || fail "a failed run wrote over --save's file"
  ;;
generate)
  "$gpt" "${small[@]}" --steps 60 --lr 1e-2 --prompt 'The cat' --tokens 30 --save "$tmp/m.st" --out "$tmp/g" \
    > "$tmp/train.log"
  grep -q "^sampled text (temperature 0.8, top-k 0, top-p 1):" "$tmp/train.log" || fail "no sample header"
  grep -q "^The cat" "$tmp/train.log" || fail "the sample does not start with the prompt"
  text() { "$gpt" --load "$tmp/m.st" --prompt 'A dog' --tokens 40 "$@" | sed -n '/^sampled text/,$p' | tail -n +2; }
  greedy=$(text --temperature 0)
  [ "$(text --temperature 0)" = "$greedy" ] || fail "greedy text differs between runs"
  [ "$(text --temperature 1 --top-k 1 --seed 9)" = "$greedy" ] || fail "top-k 1 is not the greedy text"
  case $greedy in "A dog"*) ;; *) fail "the text does not start with the prompt: $greedy" ;; esac
  a=$(text --temperature 1 --seed 3) b=$(text --temperature 1 --seed 3) c=$(text --temperature 1 --seed 4)
  [ "$a" = "$b" ] || fail "the same seed gave different text"
  [ "$a" != "$c" ] || fail "seeds 3 and 4 gave the same text"
  check2() { # LOG-NAME, expected text, flags...
    local name=$1 want=$2; shift 2
    expect 2 "$tmp/$name.log" "$gpt" "$@"
    grep -qF -- "$want" "$tmp/$name.log" || { cat "$tmp/$name.log" >&2; fail "$name: the message lacks '$want'"; }
  }
  check2 top_p0 "--top-p 0 must be in (0, 1]" "${small[@]}" --top-p 0 --out "$tmp/x"
  check2 top_p2 "--top-p 1.5 must be in (0, 1]" --load "$tmp/m.st" --top-p 1.5
  check2 temp "--temperature -0.5 must be >= 0 (0: greedy)" "${small[@]}" --temperature -0.5 --out "$tmp/x"
  check2 long "--prompt holds more than 16 bytes, the model's context" "${small[@]}" --prompt 'The cat sat on the mat' \
    --out "$tmp/x"
  check2 beta "--beta2 1 must be in [0, 1)" "${small[@]}" --beta2 1 --out "$tmp/x"
  [ ! -e "$tmp/x" ] || fail "a refused run wrote its output folder"
  ;;
checkpoint)
  for arch in llama gpt2; do
    "$gpt" "${small[@]}" --layers 2 --arch "$arch" --steps 12 --sample 0 --save "$tmp/p.st" --out "$tmp/p" > /dev/null
    "$gpt" "${small[@]}" --layers 2 --arch "$arch" --steps 12 --sample 0 --checkpoint-activations --save "$tmp/c.st" \
      --out "$tmp/c" > /dev/null
    cmp "$tmp/p/train.dat" "$tmp/c/train.dat" || fail "$arch: --checkpoint-activations changed the losses"
    cmp "$tmp/p.st" "$tmp/c.st" || fail "$arch: --checkpoint-activations changed the trained model"
  done
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "ok: gpt $case_name"
