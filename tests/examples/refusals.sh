#!/usr/bin/env bash
# What the programs refuse, and say, when what they are given is wrong:
#   devices   a device (/dev/zero) or a pipe (a FIFO) named as a file to
#             read: gpt --resume, xor --resume, tapegrad-gradcheck
#             --values x=@FILE and --r @FILE exit at once with the reason
#             (they used to read /dev/zero until memory ran out, or block
#             on the FIFO forever; `timeout` turns a hang into a failure)
#   messages  the reasons and exit statuses: spiral --resume of a state
#             saved with another --norm, --optim or --dtype shows both
#             settings; custom_op whose loss did not fall enough says so;
#             gpt --layers 100000 is a flag error (status 2)
#   picture   a gnuplot that exits 0 after writing a cut-short PNG (as on a
#             full disk; a fake one on PATH): xor and spiral fail with the
#             reason, claim no picture and leave none
# Usage: refusals.sh BUILD_DIR CASE
set -euo pipefail
build=$(cd "$1" && pwd)
case_name=$2
ex=$build/examples
gradcheck=$build/tools/tapegrad-gradcheck
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect STATUS LOG CMD...: runs CMD with stdout+stderr to LOG and checks
# its exit status, and that no sanitizer reported anything.
expect() {
  local want=$1 log=$2 rc=0; shift 2
  "$@" > "$log" 2>&1 || rc=$?
  if grep -q "Sanitizer" "$log"; then cat "$log" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$rc" -eq "$want" ] || { cat "$log" >&2; fail "$*: exit status $rc, want $want"; }
}
# says LOG TEXT: LOG holds TEXT (a fixed string).
says() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "the output lacks '$2'"; }; }

case $case_name in
devices)
  mkfifo "$tmp/fifo"
  for i in $(seq 1 100); do echo "The cat sat on the mat, number $((i % 17)). A dog ran after it."; done > "$tmp/text.txt"
  gpt=(timeout 30 "$ex/gpt" --data "$tmp/text.txt" --layers 1 --heads 2 --channels 16 --context 16 --batch 4
       --steps 4 --sample 0 --out "$tmp/o")
  expect 1 "$tmp/log" "${gpt[@]}" --resume /dev/zero
  says "$tmp/log" "/dev/zero is a character device, not a regular file"
  expect 1 "$tmp/log" "${gpt[@]}" --resume "$tmp/fifo"
  says "$tmp/log" "$tmp/fifo is a pipe (FIFO), not a regular file"
  expect 1 "$tmp/log" timeout 30 "$ex/xor" --steps 4 --resume "$tmp/fifo" --out "$tmp/o"
  says "$tmp/log" "is a pipe (FIFO), not a regular file"
  if [ -x "$gradcheck" ]; then
    for arg in "--values x=@/dev/zero" "--r @/dev/zero" "--values x=@$tmp/fifo"; do
      # shellcheck disable=SC2086 # the flag and its value, split on purpose
      expect 2 "$tmp/log" timeout 30 "$gradcheck" check exp --shape 3 $arg
      says "$tmp/log" "not a regular file"
    done
    says "$tmp/log" "--values: $tmp/fifo is a pipe (FIFO)"
  fi
  echo "devices: a device or a pipe named as a file to read is refused at once, with the reason"
  ;;
messages)
  spiral=("$ex/spiral" --steps 4 --out "$tmp/o")
  "${spiral[@]}" --norm rmsnorm --stop-after 2 --save "$tmp/r.st" > /dev/null
  expect 1 "$tmp/log" "${spiral[@]}" --norm layernorm --resume "$tmp/r.st"
  says "$tmp/log" "r.st holds the parts \"rmsnorm\", and this load has \"layernorm\""
  expect 1 "$tmp/log" "${spiral[@]}" --norm rmsnorm --optim sgd --resume "$tmp/r.st"
  says "$tmp/log" "(part \"rmsnorm\") was saved by an optimizer with settings \"adam lr=0.01"
  says "$tmp/log" "this one has \"sgd lr=0.01"
  "${spiral[@]}" --norm rmsnorm --dtype bf16 --stop-after 2 --save "$tmp/b.st" > /dev/null
  expect 1 "$tmp/log" "${spiral[@]}" --norm rmsnorm --resume "$tmp/b.st"
  says "$tmp/log" "b.st was saved by a run computing in bfloat16, and this context computes in float32"
  expect 0 "$tmp/log" "${spiral[@]}" --norm rmsnorm --dtype bf16 --resume "$tmp/b.st"
  expect 1 "$tmp/log" "$ex/custom_op" --steps 3
  says "$tmp/log" "custom_op: the loss fell from 1 to"
  says "$tmp/log" "in 3 steps, not below a tenth of where it started"
  expect 2 "$tmp/log" "$ex/gpt" --layers 100000
  says "$tmp/log" "gpt: --layers 100000: at most 9999"
  echo "messages: other settings named on both sides, a loss that did not fall said, a flag error status 2"
  ;;
picture)
  # a gnuplot that draws the script's `set output` file as a PNG signature
  # and 300 bytes, without the IEND chunk that ends every PNG, and exits 0
  mkdir "$tmp/bin"
  cat > "$tmp/bin/gnuplot" <<'EOF'
#!/bin/sh
out=$(sed -n "s/^set output '\(.*\)'$/\1/p" "$1")
printf '\211PNG\r\n\032\n' > "$out"
head -c 300 /dev/zero >> "$out"
exit 0
EOF
  chmod +x "$tmp/bin/gnuplot"
  PATH="$tmp/bin:$PATH" expect 1 "$tmp/log" "$ex/xor" --steps 20 --out "$tmp/x"
  says "$tmp/log" "left $tmp/x/loss.png incomplete (308 bytes, not ending with the PNG's IEND chunk"
  if grep -q "^wrote" "$tmp/log"; then fail "xor claims a picture: $(grep "^wrote" "$tmp/log")"; fi
  [ ! -e "$tmp/x/loss.png" ] || fail "xor left the cut-short loss.png"
  PATH="$tmp/bin:$PATH" expect 1 "$tmp/log" "$ex/spiral" --norm none --steps 4 --out "$tmp/s"
  says "$tmp/log" "loss.png incomplete"
  says "$tmp/log" "gnuplot ran but wrote no complete PNG $tmp/s/boundary.png"
  if grep -q "^wrote\|^picture" "$tmp/log"; then fail "spiral claims a picture: $(grep "^wrote\|^picture" "$tmp/log")"; fi
  echo "picture: a PNG cut short is reported and never announced"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
