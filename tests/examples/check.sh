#!/usr/bin/env bash
# Runs the examples in short configurations and checks what a user would:
# the loss falls well below where it started, the same seed gives the same
# losses (with 1 or 2 threads), the pictures are real PNG files, a bad flag
# gives the usage and exit status 2, the README's and the docs' programs
# and recipes run as printed, a resume continues exactly, and every failure (a full disk,
# gnuplot missing or failing, a damaged or unusable input) is reported with
# its reason, a non-zero status, no false claims and no leak (LeakSanitizer
# runs these cases in the sanitize build).
# Usage: check.sh BUILD_DIR CASE
#   CASE: xor | spiral | charlm | determinism | pngs | resume | flags |
#         installed | readme_resume | resume_past | resume_log | no_gnuplot |
#         full_disk | killed_save | error_paths | messages | boundary_colours |
#         bench_fma_peak | mixed_precision
# The installed case also reads TG_CMAKE, TG_CC, TG_LIBDIR and TG_SANITIZE
# from the environment (tests/examples.cmake sets them).
set -euo pipefail
build=$(cd "$1" && pwd)
case_name=$2
ex=$build/examples
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
first_loss() { awk '!/^#/ {print $2; exit}' "$1"; }
last_loss() { awk '!/^#/ {v = $2} END {print v}' "$1"; }
# below A B R: true when A < R * B
below() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN {exit !(a < r * b)}'; }
# doc_block FILE NAME: the fenced block after the comment of FILE (a path
# from the source folder) that says it is tested here and names NAME
doc_block() {
  awk -v name="$2" '
    index($0, "<!-- tested by") && index($0, name) {armed = 1; next}
    armed && /^```/ {if (inside) exit; inside = 1; next}
    inside {print}' "$src/$1"
}
# is_excerpt EXCERPT FILE: true when EXCERPT is parts of FILE, each verbatim
# and in FILE's order, separated by lines that are only "/* ... */"; at
# least 10 lines of FILE in all.
is_excerpt() {
  awk '
    NR == FNR {ex[++n] = $0; next}
    {file[++m] = $0}
    END {
      at = 1; i = 1; matched = 0
      while (i <= n) {
        if (ex[i] ~ /^[ \t]*\/\* \.\.\. \*\/$/) {i++; continue}
        j = i; while (j <= n && ex[j] !~ /^[ \t]*\/\* \.\.\. \*\/$/) j++
        found = 0
        for (k = at; k + (j - i) - 1 <= m && !found; k++) {
          ok = 1
          for (t = 0; t < j - i && ok; t++) if (file[k + t] != ex[i + t]) ok = 0
          if (ok) {found = 1; at = k + (j - i)}
        }
        if (!found) {print "not in the file, in order: " ex[i] > "/dev/stderr"; exit 1}
        matched += j - i; i = j
      }
      exit !(matched >= 10)
    }' "$1" "$2"
}
# expect STATUS LOG CMD...: runs CMD with stdout+stderr to LOG, checks its
# exit status and that no sanitizer reported anything.
expect() {
  local want=$1 log=$2 rc=0; shift 2
  "$@" > "$log" 2>&1 || rc=$?
  if grep -q "Sanitizer" "$log"; then cat "$log" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$rc" -eq "$want" ] || { cat "$log" >&2; fail "$*: exit status $rc, want $want"; }
}
# no_false_claims LOG: every PNG the program says it wrote exists and is a PNG.
no_false_claims() {
  local png
  for png in $(sed -n 's/^wrote \(.*\.png\)$/\1/p; s/^pictures\?: //p' "$1" | tr ' ' '\n' | grep '\.png$'); do
    [ -s "$png" ] || fail "the output claims $png, which does not exist"
    [ "$(head -c 4 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e47" ] || fail "$png is not a PNG"
  done
}

case $case_name in
xor)
  # Measured (seed 42, 300 steps): loss 0.2524 at step 1, 0.000036 at the end.
  "$ex/xor" --steps 300 --out "$tmp" > "$tmp/log"
  a=$(awk '$1 == "step" && $2 == 1 {print $4}' "$tmp/log")
  b=$(awk '$1 == "final" {print $3}' "$tmp/log")
  echo "xor: loss $a -> $b"
  below "$b" "$a" 0.01 || fail "xor: final loss $b is not below 1% of the initial $a"
  ;;
spiral)
  # Measured (seed 1, 200 steps): 1.18 at step 1, 0.022 (rmsnorm), about
  # 0.02-0.05 for the others. Threshold: a fifth of the initial loss.
  "$ex/spiral" --norm all --steps 200 --out "$tmp" > "$tmp/log"
  for norm in none rmsnorm layernorm; do
    a=$(first_loss "$tmp/loss_$norm.dat"); b=$(last_loss "$tmp/loss_$norm.dat")
    echo "spiral --norm $norm: loss $a -> $b"
    below "$b" "$a" 0.2 || fail "spiral $norm: final loss $b is not below 20% of $a"
  done
  grep -q "accuracy" "$tmp/log" || fail "spiral: no accuracy table printed"
  ;;
charlm)
  # Measured (seed 1, 300 steps): validation loss 3.38 at step 1, 2.32 at
  # step 300 (uniform guessing is ln 27 = 3.30). Threshold: 80%.
  "$ex/charlm" --steps 300 --every 100 --out "$tmp" > "$tmp/log"
  a=$(first_loss "$tmp/val.dat"); b=$(last_loss "$tmp/val.dat")
  echo "charlm: validation loss $a -> $b"
  below "$b" "$a" 0.8 || fail "charlm: validation loss $b is not below 80% of $a"
  n=$(sed -n '/^sampled words/,$p' "$tmp/log" | tail -n +2 | wc -w)
  [ "$n" -eq 12 ] || fail "charlm: $n sampled words, want 12"
  ;;
determinism)
  # Same seed twice, and 1 thread against 2: identical loss logs.
  "$ex/spiral" --norm layernorm --steps 60 --seed 5 --threads 1 --out "$tmp/a" > /dev/null
  "$ex/spiral" --norm layernorm --steps 60 --seed 5 --threads 1 --out "$tmp/b" > /dev/null
  "$ex/spiral" --norm layernorm --steps 60 --seed 5 --threads 2 --out "$tmp/c" > /dev/null
  "$ex/spiral" --norm layernorm --steps 60 --seed 6 --threads 1 --out "$tmp/d" > /dev/null
  cmp "$tmp/a/loss_layernorm.dat" "$tmp/b/loss_layernorm.dat" || fail "same seed, different losses"
  cmp "$tmp/a/loss_layernorm.dat" "$tmp/c/loss_layernorm.dat" || fail "1 and 2 threads give different losses"
  if cmp -s "$tmp/a/loss_layernorm.dat" "$tmp/d/loss_layernorm.dat"; then fail "seeds 5 and 6 gave the same losses"; fi
  "$ex/charlm" --steps 40 --every 20 --seed 3 --out "$tmp/e" > "$tmp/e.log"
  "$ex/charlm" --steps 40 --every 20 --seed 3 --threads 1 --out "$tmp/f" > "$tmp/f.log"
  cmp "$tmp/e/train.dat" "$tmp/f/train.dat" || fail "charlm: same seed, different losses"
  echo "determinism: identical losses for the same seed, with 1 and 2 threads"
  ;;
pngs)
  # The demo's pictures (a short run of what `make demo` runs).
  command -v gnuplot > /dev/null || { echo "gnuplot is not installed: skipping the PNG check"; exit 0; }
  "$ex/spiral" --norm all --steps 100 --out "$tmp" > /dev/null
  for png in loss boundary; do
    f=$tmp/$png.png
    [ -f "$f" ] || fail "$png.png was not written"
    sig=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
    [ "$sig" = "89504e470d0a1a0a" ] || fail "$png.png does not start with the PNG signature ($sig)"
    size=$(stat -c %s "$f")
    [ "$size" -gt 10000 ] || fail "$png.png is only $size bytes"
    echo "$png.png: PNG, $size bytes"
  done
  ;;
resume)
  # Exact resume: N steps straight == N/2 steps, save, a new process that
  # loads, N/2 more. The losses of the second half and the final checkpoint
  # (parameters, optimizer state, RNG state) must be bit-identical.
  # (last_rows FILE K: the data rows after step K)
  last_rows() { awk -v k="$2" '!/^#/ && $1 > k' "$1"; }
  run_pair() { # name, program, its flags...
    local name=$1 prog=$2; shift 2
    "$ex/$prog" "$@" --steps 40 --save "$tmp/$name-full.st" --out "$tmp/$name-a" > /dev/null
    "$ex/$prog" "$@" --steps 40 --stop-after 20 --save "$tmp/$name-half.st" --out "$tmp/$name-b" > /dev/null
    "$ex/$prog" "$@" --steps 40 --resume "$tmp/$name-half.st" --save "$tmp/$name-resumed.st" --out "$tmp/$name-c" > "$tmp/$name-c.log"
    grep -q "resumed from .* at step 20" "$tmp/$name-c.log" || fail "$name: did not resume at step 20"
    cmp "$tmp/$name-full.st" "$tmp/$name-resumed.st" || fail "$name: resumed checkpoint differs from the straight run's"
  }
  run_pair sgd spiral --norm rmsnorm --optim sgd --lr 0.05
  diff <(last_rows "$tmp/sgd-a/loss_rmsnorm.dat" 20) <(last_rows "$tmp/sgd-c/loss_rmsnorm.dat" 20) \
    || fail "sgd: losses after resuming differ"
  run_pair adamw spiral --norm layernorm --optim adamw --schedule cosine
  diff <(last_rows "$tmp/adamw-a/loss_layernorm.dat" 20) <(last_rows "$tmp/adamw-c/loss_layernorm.dat" 20) \
    || fail "adamw: losses after resuming differ"
  run_pair charlm charlm --every 10
  diff <(last_rows "$tmp/charlm-a/train.dat" 20) <(last_rows "$tmp/charlm-c/train.dat" 20) \
    || fail "charlm: losses after resuming differ"
  [ "$(last_rows "$tmp/sgd-c/loss_rmsnorm.dat" 20 | wc -l)" -eq 20 ] || fail "sgd: resumed run logged the wrong steps"
  # xor's --save, --resume, --stop-after and --out work as listed.
  run_pair xor xor
  diff <(last_rows "$tmp/xor-a/loss.dat" 20) <(last_rows "$tmp/xor-c/loss.dat" 20) \
    || fail "xor: losses after resuming differ"
  # spiral --norm all: the three models in one file.
  run_pair all spiral --norm all
  for norm in none rmsnorm layernorm; do
    diff <(last_rows "$tmp/all-a/loss_$norm.dat" 20) <(last_rows "$tmp/all-c/loss_$norm.dat" 20) \
      || fail "spiral --norm all: $norm's losses after resuming differ"
  done
  echo "resume: SGD+momentum, AdamW+warmup-cosine, charlm (AdamW, RNG minibatches), xor and spiral --norm all" \
       "resume bit-exactly"
  ;;
flags)
  for prog in xor spiral charlm; do
    "$ex/$prog" --help | grep -q -- "--steps" || fail "$prog --help lacks --steps"
    for bad in "--bogus 1" "--steps 0" "--lr abc" "--seed" "stray"; do
      set +e
      # shellcheck disable=SC2086
      "$ex/$prog" $bad > "$tmp/out" 2> "$tmp/err"
      rc=$?
      set -e
      [ "$rc" -eq 2 ] || fail "$prog $bad exited $rc, want 2"
      grep -q "usage:" "$tmp/err" || fail "$prog $bad did not print the usage"
    done
  done
  set +e
  "$ex/spiral" --norm batchnorm > /dev/null 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "spiral --norm batchnorm exited $rc, want 2"
  echo "flags: --help works, bad flags exit 2 with the usage"
  ;;
installed)
  # The README's program (an excerpt of examples/xor.c: the file is built)
  # and the training-state recipe of docs/training-state.md, built with the
  # README's cc line against a fresh install (pkg-config), then run.
  # shellcheck source=tests/install/prefix.sh
  . "$src/tests/install/prefix.sh"
  install_prefix "$build" "$tmp/prefix"
  doc_block README.md "an excerpt of examples/xor.c" > "$tmp/readme-xor.c"
  is_excerpt "$tmp/readme-xor.c" "$src/examples/xor.c" || fail "the README's XOR code is not an excerpt of examples/xor.c"
  line=$(doc_block README.md "this command, on this file")
  [ "$line" = 'cc xor.c $(pkg-config --cflags --libs tapegrad) -o xor' ] || fail "the README's cc line changed: $line"
  mkdir "$tmp/user" && cp "$src/examples/xor.c" "$tmp/user/"
  # The README's line, with the sanitizer flags of this build when it has some.
  (cd "$tmp/user" && "$TG_CC" "${extra[@]}" -std=c11 -Wall -Wextra -Wpedantic -Werror \
     xor.c $(pkg-config --cflags --libs tapegrad) -o xor) || fail "xor.c does not build against the installed library"
  expect 0 "$tmp/xor.log" "$tmp/user/xor" --steps 300 --out "$tmp/xor-out"
  grep -q "^final loss" "$tmp/xor.log" || fail "the installed xor printed no final loss"
  cmp <(grep -v "^wrote\|gnuplot" "$tmp/xor.log") <("$ex/xor" --steps 300 --out "$tmp/xor-tree" | grep -v "^wrote\|gnuplot") \
    || fail "the installed xor and build/examples/xor differ"
  # The recipe, as printed, with a main that saves after 3 steps and resumes
  # in a new context.
  doc_block docs/training-state.md "compiled and run as printed" > "$tmp/recipe.c"
  grep -q "tg_train_save" "$tmp/recipe.c" || fail "no training-state recipe in docs/training-state.md"
  cat >> "$tmp/recipe.c" <<'MAIN'
#include <stdio.h>
#include <string.h>
static tg_linear *fc;
static tg_params params;
static tg_optim *opt;
static void build(tg_ctx *ctx) {
    fc = tg_linear_new(ctx, "fc", 2, 1, true, TG_F32);
    params = (tg_params){0};
    tg_linear_params(ctx, fc, &params);
    tg_adam_opts o = tg_adam_defaults();
    opt = tg_adam_new(ctx, &params, &o);
}
static void teardown(tg_ctx *ctx) {
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_linear_free(ctx, fc);
    tg_ctx_free(ctx);
}
int main(int argc, char **argv) {
    (void)argc;
    tg_ctx *a = tg_ctx_new(1);
    build(a);
    for (int s = 0; s < 3; s++) {
        tg_tensor *x = tg_rand(a, TG_F32, TG_SHAPE(4, 2), -1, 1);
        tg_tensor *loss = tg_mse_loss(a, tg_linear_forward(a, fc, x), tg_sum_axis(a, x, 1, true));
        tg_optim_zero_grad(a, opt);
        tg_backward(a, loss);
        tg_optim_step(a, opt);
        tg_ctx_reset(a);
    }
    float w[3];
    memcpy(w, params.items[0].value->data, 2 * sizeof *w);
    if (!save_run(a, argv[1], &params, opt, 7)) return 1;
    w[2] = (float)tg_rng_uniform(a); /* the next draw after the save */
    teardown(a);
    tg_ctx *b = tg_ctx_new(2);
    build(b);
    int64_t epoch = 0;
    bool ok = resume_run(b, argv[1], &params, opt, &epoch) && epoch == 7 && tg_optim_steps(opt) == 3 &&
              memcmp(w, params.items[0].value->data, 2 * sizeof *w) == 0 && (float)tg_rng_uniform(b) == w[2];
    printf("%s\n", ok ? "recipe: resumed" : tg_error_message(b));
    teardown(b);
    return ok ? 0 : 1;
}
MAIN
  "$TG_CC" "${extra[@]}" -std=c11 -Wall -Wextra -Werror "$tmp/recipe.c" $(pkg-config --cflags --libs tapegrad) \
    -o "$tmp/recipe" || fail "the recipe of docs/training-state.md does not build"
  expect 0 "$tmp/recipe.log" "$tmp/recipe" "$tmp/run.st"
  cat "$tmp/recipe.log"
  echo "installed: xor.c (the README's excerpt) and the training-state recipe build with the README's cc line against the installed library and run"
  ;;
readme_resume)
  # The resume recipe of docs/training-state.md, run as printed (from a
  # folder holding the programs, as build/examples/ does), against one
  # 40-step run.
  mkdir "$tmp/run" "$tmp/straight"
  ln -s "$ex/spiral" "$tmp/run/spiral"
  doc_block docs/training-state.md "case readme_resume" > "$tmp/recipe.sh"
  grep -q "resume" "$tmp/recipe.sh" || fail "no resume recipe in docs/training-state.md"
  expect 0 "$tmp/recipe.log" bash -euo pipefail -c "cd '$tmp/run' && . '$tmp/recipe.sh'"
  grep -q "resumed from a.st at step 20" "$tmp/recipe.log" || fail "the recipe did not resume at step 20"
  (cd "$tmp/straight" && "$ex/spiral" --steps 40 > log)
  for norm in none rmsnorm layernorm; do
    cmp "$tmp/straight/out/spiral/loss_$norm.dat" "$tmp/run/out/spiral/loss_$norm.dat" \
      || fail "after the recipe, loss_$norm.dat differs from one 40-step run's"
    cmp "$tmp/straight/out/spiral/regions_$norm.dat" "$tmp/run/out/spiral/regions_$norm.dat" \
      || fail "after the recipe, the $norm model's decision regions differ from one 40-step run's"
  done
  diff <(sed -n '/^norm  /,/^$/p' "$tmp/straight/log") <(sed -n '/resumed from/,$p' "$tmp/recipe.log" | sed -n '/^norm  /,/^$/p') \
    || fail "the final table differs from one 40-step run's"
  echo "readme_resume: the recipe of docs/training-state.md gives exactly one 40-step run (--norm all: three models in a.st)"
  ;;
resume_past)
  # A state at or past the last step to run: an error that says so, never
  # a table of zeros.
  "$ex/spiral" --norm rmsnorm --steps 40 --stop-after 20 --save "$tmp/s.st" --out "$tmp/s" > /dev/null
  "$ex/charlm" --steps 40 --stop-after 20 --save "$tmp/c.st" --out "$tmp/c" > /dev/null
  "$ex/xor" --steps 40 --stop-after 20 --save "$tmp/x.st" --out "$tmp/x" > /dev/null
  for run in "spiral --norm rmsnorm --steps 10 --resume $tmp/s.st" "spiral --norm rmsnorm --steps 20 --resume $tmp/s.st" \
             "spiral --norm rmsnorm --steps 40 --stop-after 20 --resume $tmp/s.st" \
             "charlm --steps 40 --stop-after 20 --resume $tmp/c.st" "xor --steps 20 --resume $tmp/x.st"; do
    # shellcheck disable=SC2086
    expect 1 "$tmp/log" "$ex/"$run --out "$tmp/o"
    grep -q "nothing to train" "$tmp/log" || fail "$run: no reason given"
    if grep -q "0\.000000\|0\.0%\|final" "$tmp/log"; then fail "$run: printed results it does not have"; fi
  done
  echo "resume_past: a state at or past the last step is refused with the reason"
  ;;
resume_log)
  # Resuming into the same --out: the loss logs go on from the earlier rows
  # (exactly one straight run's), and the progress counts the steps run.
  "$ex/spiral" --norm layernorm --steps 40 --out "$tmp/a" > /dev/null
  "$ex/spiral" --norm layernorm --steps 40 --stop-after 20 --save "$tmp/s.st" --out "$tmp/b" > /dev/null
  expect 0 "$tmp/log" "$ex/spiral" --norm layernorm --steps 40 --every 1 --resume "$tmp/s.st" --out "$tmp/b"
  cmp "$tmp/a/loss_layernorm.dat" "$tmp/b/loss_layernorm.dat" || fail "spiral: the resumed loss log is not the straight one"
  grep -q "^done: 20 steps" "$tmp/log" || fail "spiral: the summary does not count the 20 steps run: $(grep done: "$tmp/log")"
  # The first line's rate (one step) is not above 10x the whole run's.
  first=$(awk '/^step 21\/40/ {for (i = 1; i < NF; i++) if ($(i + 1) == "steps/s") print $i}' "$tmp/log")
  whole=$(sed -n 's/^done: .* (\([0-9.]*\) steps\/s).*/\1/p' "$tmp/log")
  below "$first" "$whole" 10 || fail "spiral: the first line after resuming says $first steps/s, the run $whole"
  "$ex/charlm" --steps 40 --every 10 --out "$tmp/c" > /dev/null
  "$ex/charlm" --steps 40 --every 10 --stop-after 20 --save "$tmp/c.st" --out "$tmp/d" > /dev/null
  "$ex/charlm" --steps 40 --every 10 --resume "$tmp/c.st" --out "$tmp/d" > /dev/null
  cmp "$tmp/c/train.dat" "$tmp/d/train.dat" || fail "charlm: the resumed train log is not the straight one"
  cmp "$tmp/c/val.dat" "$tmp/d/val.dat" || fail "charlm: the resumed validation log is not the straight one"
  echo "resume_log: resumed logs continue the curves; progress counts only the steps run ($first steps/s first, $whole overall)"
  ;;
no_gnuplot)
  # Without gnuplot, or with one that fails: only pictures that exist are
  # claimed, and a failure is said and gives status 1.
  mkdir "$tmp/empty" "$tmp/bad"
  printf '#!/bin/sh\necho "gnuplot: simulated failure" >&2\nexit 1\n' > "$tmp/bad/gnuplot"
  chmod +x "$tmp/bad/gnuplot"
  for prog in "spiral --steps 5" "charlm --steps 5" "xor --steps 5"; do
    name=${prog%% *}
    # shellcheck disable=SC2086
    expect 0 "$tmp/$name-none.log" env PATH="$tmp/empty" "$ex/"$prog --out "$tmp/$name-none"
    grep -q "gnuplot is not installed" "$tmp/$name-none.log" || fail "$name: no word about the missing gnuplot"
    no_false_claims "$tmp/$name-none.log"
    if ls "$tmp/$name-none/"*.png > /dev/null 2>&1; then fail "$name: a PNG without gnuplot?"; fi
    # shellcheck disable=SC2086
    expect 1 "$tmp/$name-bad.log" env PATH="$tmp/bad:/usr/bin:/bin" "$ex/"$prog --out "$tmp/$name-bad"
    grep -q "gnuplot failed.*simulated failure" "$tmp/$name-bad.log" || fail "$name: the gnuplot failure is not reported"
    no_false_claims "$tmp/$name-bad.log"
  done
  echo "no_gnuplot: no picture claimed that does not exist; a failing gnuplot is reported with status 1"
  ;;
full_disk)
  # Every write checked: with a file-size limit (write fails with EFBIG,
  # any user) and, where a private tmpfs can be mounted (root), a full
  # 64 KiB filesystem (ENOSPC). Status 1, errno's text, no false claims.
  # (the output goes through a pipe, which the limit does not cover)
  limited() { (trap '' XFSZ; ulimit -f "$1"; shift; exec "$@") 2>&1 | cat; }
  # (limit in KiB: 0 fails the first log line, 40 the checkpoints, 200
  # spiral's decision regions; xor's files are all small.)
  for run in "0 spiral" "40 spiral" "200 spiral" "0 charlm" "40 charlm" "0 xor"; do
    read -r limit name <<< "$run"
    case $name in
      spiral) prog="spiral --norm all --steps 30" ;;
      *) prog="$name --steps 30" ;;
    esac
    # shellcheck disable=SC2086
    expect 1 "$tmp/log" limited "$limit" "$ex/"$prog --save "$tmp/$name-$limit.st" --out "$tmp/$name-$limit"
    grep -q "File too large" "$tmp/log" || { cat "$tmp/log" >&2; fail "$name (${limit} KiB files): no errno text"; }
    no_false_claims "$tmp/log"
    if grep -q "^saved" "$tmp/log" && [ ! -s "$tmp/$name-$limit.st" ]; then fail "$name: claims a save it did not make"; fi
  done
  # The output itself: stdout on a full device.
  for prog in "spiral --norm none --steps 3" "charlm --steps 3" "xor --steps 3"; do
    # shellcheck disable=SC2086
    expect 1 "$tmp/log" bash -c "\"\$0\" \"\$@\" > /dev/full" "$ex/"$prog --out "$tmp/full"
    grep -q "cannot write the output: No space left on device" "$tmp/log" || fail "${prog%% *} > /dev/full: $(cat "$tmp/log")"
  done
  mkdir "$tmp/small" "$tmp/probe"
  # shellcheck disable=SC2016
  if command -v unshare > /dev/null &&
     unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs "$1"' _ "$tmp/probe" 2> /dev/null; then
    # shellcheck disable=SC2016
    expect 1 "$tmp/log" unshare -m bash -c 'mount -t tmpfs -o size=64k tmpfs "$1" && exec "$2" --norm all --steps 30 --out "$1/o"' \
      _ "$tmp/small" "$ex/spiral"
    grep -q "No space left on device" "$tmp/log" || { cat "$tmp/log" >&2; fail "spiral on a full tmpfs: no errno text"; }
    echo "full_disk: a full 64 KiB tmpfs: $(grep -m1 "No space" "$tmp/log")"
  else
    echo "full_disk: cannot mount a private tmpfs here (needs root): the file-size limit stands in for a full disk"
  fi
  echo "full_disk: every write failure reported with errno's text and status 1"
  ;;
killed_save)
  # A save killed mid-write leaves its temporary file; the next save of the
  # same target removes it. (The kill: a file-size limit with SIGXFSZ left
  # at its default, which ends the process during the write like kill -9.)
  # Each killed save finds the previous one's temporary (its process gone)
  # and removes it, so one is left at a time, not one per kill.
  for i in 1 2 3; do
    rc=0
    (ulimit -f 8; exec "$ex/spiral" --norm rmsnorm --steps 2 --save "$tmp/k.st" --out "$tmp/o") > /dev/null 2>&1 || rc=$?
    [ "$rc" -gt 128 ] || fail "the save was not killed (status $rc)"
    n=$(find "$tmp" -maxdepth 1 -name 'k.st.tmp-*' | wc -l)
    [ "$n" -eq 1 ] || fail "after $i killed saves, $n temporary files (want 1: the last one's)"
  done
  "$ex/spiral" --norm rmsnorm --steps 2 --save "$tmp/k.st" --out "$tmp/o" > /dev/null
  n=$(find "$tmp" -maxdepth 1 -name 'k.st.tmp-*' | wc -l)
  [ "$n" -eq 0 ] || fail "$n stale temporary files left after a save"
  [ -s "$tmp/k.st" ] || fail "no checkpoint"
  echo "killed_save: each save removed the temporary a killed save had left"
  ;;
error_paths)
  # Errors after the models are built, and unusable inputs: status 1, the
  # reason, and (sanitize build) no leak. Inputs that never end are bounded.
  "$ex/spiral" --norm rmsnorm --steps 4 --stop-after 2 --save "$tmp/r.st" --out "$tmp/o" > /dev/null
  head -c 100 "$tmp/r.st" > "$tmp/cut.st"
  expect 1 "$tmp/log" "$ex/spiral" --norm rmsnorm --steps 4 --resume "$tmp/cut.st" --out "$tmp/o"
  grep -q "tg_train_load_parts: .*cut.st: header length" "$tmp/log" || fail "spiral: no reason for the damaged file"
  expect 1 "$tmp/log" "$ex/spiral" --norm layernorm --steps 4 --resume "$tmp/r.st" --out "$tmp/o"
  grep -q "tg_train_load_parts: .*r.st holds the parts \"rmsnorm\", and this load has \"layernorm\"" "$tmp/log" \
    || fail "spiral: no reason for another model's state"
  expect 1 "$tmp/log" "$ex/spiral" --norm rmsnorm --lr 0.5 --steps 4 --resume "$tmp/r.st" --out "$tmp/o"
  grep -q "lr=0.01.*lr=0.5" "$tmp/log" || fail "spiral: the settings' mismatch is not shown"
  touch "$tmp/file"
  expect 1 "$tmp/log" "$ex/spiral" --norm all --steps 4 --out "$tmp/file/o"
  grep -q "cannot write $tmp/file/o/loss_none.dat: Not a directory" "$tmp/log" || fail "spiral: bad --out not explained"
  expect 1 "$tmp/log" "$ex/charlm" --steps 4 --out "$tmp/file/o"
  expect 1 "$tmp/log" "$ex/xor" --steps 4 --out "$tmp/file/o"
  grep -q "Not a directory" "$tmp/log" || fail "xor: bad --out not explained"
  head -c 20000 /bin/sh > "$tmp/binary"
  expect 1 "$tmp/log" "$ex/charlm" --steps 4 --data "$tmp/binary" --out "$tmp/o"
  expect 1 "$tmp/log" timeout 60 "$ex/charlm" --steps 4 --data /dev/zero --out "$tmp/o"
  grep -q "binary data" "$tmp/log" || fail "charlm --data /dev/zero: $(cat "$tmp/log")"
  expect 1 "$tmp/log" timeout 60 "$ex/charlm" --steps 4 --resume /dev/zero --out "$tmp/o"
  grep -q "/dev/zero is a character device, not a regular file" "$tmp/log" || fail "charlm --resume /dev/zero"
  expect 1 "$tmp/log" timeout 60 "$ex/spiral" --steps 4 --resume /dev/zero --out "$tmp/o"
  expect 1 "$tmp/log" timeout 120 bash -c "yes 'Not A Word' | \"$ex/charlm\" --steps 2 --data /dev/stdin --out '$tmp/o'"
  grep -q "only its first 64 MiB were read" "$tmp/log" || fail "charlm: an endless pipe is not bounded"
  grep -q "has 0 usable words" "$tmp/log" || fail "charlm: an endless pipe of non-words: $(cat "$tmp/log")"
  echo "error_paths: damaged, mismatched and device inputs, bad --out: status 1 with the reason; endless inputs bounded"
  ;;
messages)
  # Each unusable word list says what is wrong with it.
  mkdir "$tmp/dir"
  : > "$tmp/empty"
  printf 'cat\ndog\nemu\n' > "$tmp/three"
  printf 'abc\0def\n' > "$tmp/nul"
  check_data() { # file, expected message
    expect 1 "$tmp/log" "$ex/charlm" --steps 2 --data "$1" --out "$tmp/o"
    grep -qF "$2" "$tmp/log" || fail "charlm --data $1: '$(cat "$tmp/log")' lacks '$2'"
  }
  check_data "$tmp/missing" "cannot open $tmp/missing: No such file or directory"
  check_data "$tmp/dir" "$tmp/dir is a directory, not a word list"
  check_data "$tmp/empty" "$tmp/empty is empty"
  check_data "$tmp/nul" "$tmp/nul holds binary data (a NUL byte on line 1)"
  check_data "$tmp/three" "$tmp/three has 3 usable words (lines of 2-23 letters a-z); at least 20 are needed"
  if grep -q "apt-get" "$tmp/log"; then fail "charlm: the install hint for a file given with --data"; fi
  for prog in xor spiral charlm; do
    expect 2 "$tmp/log" "$ex/$prog" --bogus
    grep -q "unknown flag '--bogus'" "$tmp/log" || fail "$prog --bogus: $(head -1 "$tmp/log")"
    expect 2 "$tmp/log" "$ex/$prog" --lr inf
    grep -q "bad value for '--lr': inf" "$tmp/log" || fail "$prog --lr inf: $(head -1 "$tmp/log")"
    expect 2 "$tmp/log" "$ex/$prog" --steps
    grep -q "missing value for '--steps'" "$tmp/log" || fail "$prog --steps: $(head -1 "$tmp/log")"
  done
  expect 0 "$tmp/log" "$ex/spiral" --norm none --steps 2 --threads 1000 --out "$tmp/o"
  grep -q "note: --threads 1000 is more than the $(getconf _NPROCESSORS_ONLN) cores here" "$tmp/log" \
    || fail "no note on --threads 1000"
  echo "messages: each unusable word list and bad flag is named; --threads is capped with a note"
  ;;
boundary_colours)
  # The points of each class are drawn in its region's hue, one legend
  # entry per class.
  "$ex/spiral" --norm rmsnorm --steps 5 --out "$tmp" > /dev/null
  gp=$tmp/boundary.gp
  palette=$(sed -n "s/^set palette defined (0 '\(#[0-9a-f]*\)', 1 '\(#[0-9a-f]*\)', 2 '\(#[0-9a-f]*\)')$/\1 \2 \3/p" "$gp")
  [ -n "$palette" ] || fail "no class palette in boundary.gp"
  # dominant RGB channel of a colour: r, g or b
  hue() { local c=${1#\#}; awk -v r=$((16#${c:0:2})) -v g=$((16#${c:2:2})) -v b=$((16#${c:4:2})) \
          'BEGIN {print (r >= g && r >= b) ? "r" : (g >= b ? "g" : "b")}'; }
  read -r -a regions <<< "$palette"
  for k in 0 1 2; do
    point=$(grep -o "(\$3 == $k ? \$2 : 1/0) with points [^']*'#[0-9a-f]*' title 'class $k'" "$gp" | grep -o "#[0-9a-f]*" || true)
    [ -n "$point" ] || fail "no points series titled 'class $k'"
    [ "$(hue "$point")" = "$(hue "${regions[$k]}")" ] || fail "class $k: points $point on region ${regions[$k]}"
  done
  if grep -q "lc variable\|title 'data'" "$gp"; then fail "boundary.gp still draws all points as one 'data' series"; fi
  echo "boundary_colours: classes 0-2 drawn in their regions' hues ($palette), one legend entry each"
  ;;
bench_fma_peak)
  # make bench's FMA peak must bound real kernels on AVX2 machines (it
  # under-counted there: an array of 16 accumulators spilled out of the 16
  # vector registers). Built like make bench (-O3) but for AVX2 and FMA.
  grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo || { echo "no AVX2+FMA here: skipped"; exit 0; }
  "${TG_CC:-cc}" -std=c11 -O3 -mavx2 -mfma -I"$src/bench/common" -I"$src/include" "$src/tests/examples/fma_probe.c" \
    "$src/bench/common/machine.c" "$src/bench/common/timing.c" -o "$tmp/probe" -lm
  expect 0 "$tmp/log" "$tmp/probe"
  cat "$tmp/log"
  ;;
mixed_precision)
  # spiral --dtype bf16 and f16 (autocast over float32 master weights; f16
  # with the loss scaler): the loss falls, and a run stopped, saved and
  # resumed ends bitwise where one run does (the scaler's state is saved).
  for dt in bf16 f16; do
    mkdir "$tmp/$dt" "$tmp/$dt-straight"
    common=(--norm rmsnorm --steps 60 --dtype "$dt")
    expect 0 "$tmp/$dt/a.log" "$ex/spiral" "${common[@]}" --stop-after 30 --save "$tmp/$dt/a.st" --out "$tmp/$dt"
    expect 0 "$tmp/$dt/b.log" "$ex/spiral" "${common[@]}" --resume "$tmp/$dt/a.st" --out "$tmp/$dt"
    expect 0 "$tmp/$dt-straight/log" "$ex/spiral" "${common[@]}" --out "$tmp/$dt-straight"
    grep -q -- "--dtype $dt" "$tmp/$dt/a.log" || fail "spiral --dtype $dt does not say its dtype"
    cmp "$tmp/$dt/loss_rmsnorm.dat" "$tmp/$dt-straight/loss_rmsnorm.dat" \
      || fail "spiral --dtype $dt: the resumed run's losses differ from one run's"
    below "$(last_loss "$tmp/$dt-straight/loss_rmsnorm.dat")" "$(first_loss "$tmp/$dt-straight/loss_rmsnorm.dat")" 0.5 \
      || fail "spiral --dtype $dt: the loss did not fall"
  done
  grep -q "loss scale 65536; 0 steps skipped" "$tmp/f16-straight/log" || fail "spiral --dtype f16 printed no loss scale"
  # a state saved in float16 (with a scaler) does not resume a bfloat16 run
  expect 1 "$tmp/mix.log" "$ex/spiral" --norm rmsnorm --steps 60 --dtype bf16 --resume "$tmp/f16/a.st" --out "$tmp/mix"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "1 passed, 0 failed"
