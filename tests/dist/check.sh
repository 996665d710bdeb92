#!/usr/bin/env bash
# spiral and gpt across processes (tapegrad/dist.h, docs/distributed.md),
# checked as a user would: the parameters (the saved training state) and
# the loss logs of `mpirun -np P` are the bits of one process with
# --micro P, a resume continues exactly with the same or another number
# of processes, a rank that fails ends every rank with the reason (never a
# hang: every run is bounded by a timeout), only rank 0 writes, and the
# recipes of docs/distributed.md run as printed.
# Usage: check.sh BUILD_DIR CASE [MPI]
#   CASE: micro | gpt_micro | no_mpi | save_every | installed (any build; installed also
#         runs two processes when the third argument is 1: an MPI build);
#         bitwise | resume | failing_rank | deadline | mixed_builds | flags_differ | rank0_output |
#         readme_mpi | gpt_bitwise | gpt_resume | gpt_failing | gpt_readme
#         (MPI builds: mpirun must be on PATH).
# tests/dist.cmake sets the environment: mpirun as root, oversubscribed,
# LeakSanitizer's suppressions for MPI's own allocations, the bound
# TG_DIST_LIMIT of each command, and for the
# installed case TG_CMAKE, TG_CC, TG_LIBDIR and TG_SANITIZE.
set -euo pipefail
build=$(cd "$1" && pwd)
case_name=$2
mpi=${3:-0}
spiral=$build/examples/spiral
gpt=$build/examples/gpt
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

fail() { echo "FAIL: $*" >&2; exit 1; }
# Every command's bound in seconds (tests/dist.cmake: longer under the
# sanitizers).
limit=${TG_DIST_LIMIT:-300}
# expect STATUS LOG CMD...: runs CMD (at most $limit s) with stdout+stderr
# to LOG, checks its exit status (124: it hung) and that no sanitizer spoke.
expect() {
  local want=$1 log=$2 rc=0; shift 2
  timeout "$limit" "$@" > "$log" 2>&1 || rc=$?
  if grep -q "Sanitizer" "$log"; then cat "$log" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$rc" -ne 124 ] || { cat "$log" >&2; fail "$*: still running after $limit s (a hang?)"; }
  [ "$rc" -eq "$want" ] || { cat "$log" >&2; fail "$*: exit status $rc, want $want"; }
}
# same FILE_A FILE_B WHAT: the two files are identical, byte for byte.
same() { cmp "$1" "$2" > /dev/null || fail "$3: $1 and $2 differ"; }
# losses LOG: "first last", the loss column's first and last values
losses() { awk '!/^#/ {if (!n++) a = $2; b = $2} END {print a, b}' "$1"; }
# same_gpt A B WHAT: gpt's training states A.st and B.st and its loss logs
# in the folders A and B are identical.
same_gpt() {
  same "$1.st" "$2.st" "$3: the training state"
  same "$1/train.dat" "$2/train.dat" "$3: the training losses"
  same "$1/val.dat" "$2/val.dat" "$3: the validation losses"
}
# readme CASE: docs/distributed.md's fenced block after the comment that names
# CASE, run as printed from a folder whose build/ is this build; its log
# is $tmp/CASE.log.
readme() {
  ln -sfn "$build" build
  sed -n "/tested by tests\/dist\/check.sh (case $1)/,/^\`\`\`\$/p" "$src/docs/distributed.md" | sed '1,2d;$d' > "$1.sh"
  [ -s "$1.sh" ] || fail "no recipe for case $1 in docs/distributed.md"
  expect 0 "$tmp/$1.log" bash -euo pipefail "$1.sh"
  grep -q "bit for bit" "$tmp/$1.log" || fail "the recipe did not end with its claim: $(tail -3 "$tmp/$1.log")"
}
# gpt's small model (a few seconds a run, under the sanitizers too) on a
# text made here (the fortunes need not be installed); --batch 7 splits
# unevenly in 2 and 3.
for i in $(seq 1 400); do
  echo "The cat sat on the mat, number $((i % 17)). A dog ran after it."
  echo "%"
done > text.txt
small=(--data text.txt --layers 1 --heads 2 --channels 16 --context 16 --batch 7 --every 10 --eval-every 10 --sample 0)

case $case_name in
micro)
  # One process, a global batch drawn from the RNG, three micro-batches:
  # it learns, resumes bit for bit, and refuses splits that cannot be made.
  flags=(--norm rmsnorm --batch 60 --micro 3 --steps 60)
  expect 0 "$tmp/a.log" "$spiral" "${flags[@]}" --save a.st --out a
  read -r a b < <(losses a/loss_rmsnorm.dat)
  awk -v a="$a" -v b="$b" 'BEGIN {exit !(b < a / 2)}' || fail "--micro 3: loss $a -> $b did not halve"
  grep -q "a global batch of 60 points in 3 micro-batches" "$tmp/a.log" || fail "--micro 3: the split is not said"
  expect 0 "$tmp/h.log" "$spiral" "${flags[@]}" --stop-after 30 --save h.st --out b
  expect 0 "$tmp/r.log" "$spiral" "${flags[@]}" --resume h.st --save r.st --out b
  same a.st r.st "--micro 3, resumed at step 30"
  same a/loss_rmsnorm.dat b/loss_rmsnorm.dat "--micro 3, the resumed loss log"
  # --micro 1 is the default: the same run
  expect 0 "$tmp/c.log" "$spiral" --norm none --steps 20 --save c.st --out c
  expect 0 "$tmp/d.log" "$spiral" --norm none --steps 20 --micro 1 --save d.st --out d
  same c.st d.st "--micro 1 and the default"
  if grep -q "micro-batch" "$tmp/c.log"; then fail "one process, one micro-batch: says more than before"; fi
  expect 2 "$tmp/e.log" "$spiral" --batch 2 --micro 3 --steps 5 --out e
  grep -q "a batch of 2 points cannot make 3 micro-batches" "$tmp/e.log" || fail "--batch 2 --micro 3: $(cat "$tmp/e.log")"
  expect 2 "$tmp/e.log" "$spiral" --micro 0 --steps 5 --out e
  grep -q "\-\-micro in 1..1000000" "$tmp/e.log" || fail "--micro 0: $(cat "$tmp/e.log")"
  echo "micro: --micro 3 learns ($a -> $b), resumes bit for bit; --micro 1 is the default; bad splits refused"
  ;;
no_mpi)
  # A build without MPI started by mpirun (as mpirun would announce it):
  # refused, since each process would train alone.
  expect 1 "$tmp/log" env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$spiral" --steps 5 --out o
  grep -q "built without MPI (TG_MPI=OFF).*one of 2 processes" "$tmp/log" || fail "no reason given: $(cat "$tmp/log")"
  [ ! -e o ] || fail "it wrote output before refusing"
  expect 1 "$tmp/gpt.log" env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$gpt" "${small[@]}" --steps 5 --out o
  grep -q "built without MPI (TG_MPI=OFF).*one of 2 processes" "$tmp/gpt.log" || fail "gpt: $(cat "$tmp/gpt.log")"
  [ ! -e o ] || fail "gpt wrote output before refusing"
  echo "no_mpi: $(head -1 "$tmp/log")"
  ;;
bitwise)
  # P processes, each its slice of every global batch, against one
  # process with P micro-batches (and another thread count): the same
  # training state and losses, bit for bit, for P = 1..4 -- a batch drawn
  # from the RNG (60 points: slices of 30, 20, 15) and the full batch of
  # 300 points with the three models and AdamW with a warmup-cosine
  # schedule.
  for np in 1 2 3 4; do
    flags=(--norm layernorm --batch 60 --steps 30)
    expect 0 "$tmp/m$np.log" mpirun -np "$np" "$spiral" "${flags[@]}" --threads 1 --save "m$np.st" --out "m$np"
    expect 0 "$tmp/s$np.log" "$spiral" "${flags[@]}" --micro "$np" --threads 2 --save "s$np.st" --out "s$np"
    same "m$np.st" "s$np.st" "$np processes vs --micro $np: the training state"
    same "m$np/loss_layernorm.dat" "s$np/loss_layernorm.dat" "$np processes vs --micro $np: the losses"
  done
  # the split changes the sums' rounding, not the run: the states differ, the losses agree closely
  if cmp -s m1.st m3.st; then fail "1 and 3 micro-batches gave the same bits: is anything split?"; fi
  read -r _ a < <(losses m1/loss_layernorm.dat)
  read -r _ b < <(losses m3/loss_layernorm.dat)
  awk -v a="$a" -v b="$b" 'BEGIN {d = a - b; exit !(d < 1e-3 && d > -1e-3)}' || fail "1 vs 3 micro-batches: losses $a and $b"
  flags=(--norm all --optim adamw --schedule cosine --steps 20)
  expect 0 "$tmp/ma.log" mpirun -np 2 "$spiral" "${flags[@]}" --save ma.st --out ma
  expect 0 "$tmp/sa.log" "$spiral" "${flags[@]}" --micro 2 --save sa.st --out sa
  same ma.st sa.st "--norm all, 2 processes vs --micro 2: the training state"
  for norm in none rmsnorm layernorm; do same "ma/loss_$norm.dat" "sa/loss_$norm.dat" "--norm all ($norm)"; done
  grep -q "2 processes (.*), 1 thread each; a global batch of 300 points in 2 micro-batches" "$tmp/ma.log" \
    || fail "the 2-process run does not say how it ran: $(grep spiral: "$tmp/ma.log")"
  echo "bitwise: 1-4 processes == 1 process with as many micro-batches (states and losses, bit for bit)"
  ;;
resume)
  # Stop after 20 of 40 steps and resume: with as many processes it is
  # one 40-step run; with another count the rest is split anew, exactly as
  # one process resuming with --micro set to the new count.
  flags=(--norm rmsnorm --optim sgd --lr 0.05 --batch 48 --steps 40)
  expect 0 "$tmp/f.log" mpirun -np 2 "$spiral" "${flags[@]}" --save full.st --out f
  expect 0 "$tmp/h.log" mpirun -np 2 "$spiral" "${flags[@]}" --stop-after 20 --save half.st --out r
  expect 0 "$tmp/r.log" mpirun -np 2 "$spiral" "${flags[@]}" --resume half.st --save resumed.st --out r
  grep -q "resumed from half.st at step 20" "$tmp/r.log" || fail "did not resume at step 20"
  same full.st resumed.st "2 processes, resumed with 2"
  same f/loss_rmsnorm.dat r/loss_rmsnorm.dat "2 processes, resumed with 2: the loss log"
  # only rank 0 reads the checkpoint: rank 1 runs in a folder without
  # it (as on machines without a shared file system) and get its state
  mkdir elsewhere
  expect 0 "$tmp/w.log" mpirun -np 1 "$spiral" "${flags[@]}" --resume half.st --save w.st --out w : \
    -np 1 -wdir "$tmp/elsewhere" "$spiral" "${flags[@]}" --resume half.st --out w
  same full.st w.st "resumed with the checkpoint on rank 0 alone"
  expect 0 "$tmp/r3.log" mpirun -np 3 "$spiral" "${flags[@]}" --resume half.st --save resumed3.st --out r3
  # another split is said at run time; the same one (or its equal: 2 processes, --micro 2) is not
  grep -q "^spiral: note: half.st was trained with each batch's gradient summed over 2 slices, this run sums it over 3 .*round otherwise" \
    "$tmp/r3.log" || fail "resuming 2 processes' run on 3 did not say it rounds otherwise: $(cat "$tmp/r3.log")"
  if grep -q "note: " "$tmp/r.log" "$tmp/w.log"; then fail "resuming on as many processes printed a note"; fi
  expect 0 "$tmp/s.log" "$spiral" "${flags[@]}" --micro 2 --stop-after 20 --save s-half.st --out s
  same half.st s-half.st "2 processes vs --micro 2 after 20 steps"
  expect 0 "$tmp/s3.log" "$spiral" "${flags[@]}" --micro 3 --resume s-half.st --save s-resumed3.st --out s
  same resumed3.st s-resumed3.st "resumed with 3 processes vs --micro 3"
  # and back to one process (one micro-batch)
  expect 0 "$tmp/r1.log" "$spiral" "${flags[@]}" --resume resumed3.st --steps 50 --save r1.st --out r1
  grep -q "note: resumed3.st was trained with each batch's gradient summed over 3 slices, this run sums it over 1" \
    "$tmp/r1.log" || fail "3 -> 1 said no note"
  grep -q "resumed from resumed3.st at step 40" "$tmp/r1.log" || fail "one process did not resume at step 40"
  echo "resume: 2 -> 2 processes is one straight run, also with the checkpoint on rank 0 alone; 2 -> 3 processes == --micro 2 -> --micro 3; 3 -> 1 runs"
  ;;
failing_rank)
  # The checkpoint is damaged (rank 0 alone reads --resume; the others
  # are given a good one, which they must not read): every rank exits with
  # status 1 and the reason, none waits forever. Then a rank killed
  # mid-run: mpirun ends the others.
  "$spiral" --norm rmsnorm --steps 20 --stop-after 10 --save good.st --out g > /dev/null
  head -c 100 good.st > bad.st
  run=("$spiral" --norm rmsnorm --steps 20 --out o)
  expect 1 "$tmp/log" mpirun -np 1 "${run[@]}" --resume bad.st : -np 2 "${run[@]}" --resume good.st
  reason="tg_train_load_parts: tg_ckpt_load: bad.st: header length"
  [ "$(grep -c "^spiral: error: $reason" "$tmp/log")" -eq 1 ] || fail "rank 0 did not say why: $(cat "$tmp/log")"
  [ "$(grep -c "^spiral: error: tg_dist_agree: rank 0 failed: $reason" "$tmp/log")" -eq 2 ] \
    || fail "ranks 1 and 2 did not both name rank 0 and its reason: $(cat "$tmp/log")"
  [ ! -e o ] || fail "a log was written although the run never started"
  # a damaged copy on rank 1 is never read: the run goes on from rank 0's
  expect 0 "$tmp/log1" mpirun -np 1 "${run[@]}" --resume good.st : -np 1 "${run[@]}" --resume bad.st
  # a rank killed with SIGKILL while the run goes on
  printf '#!/bin/sh\necho $$ > "%s/victim.pid"\nexec "$@"\n' "$tmp" > victim.sh
  chmod +x victim.sh
  rc=0
  timeout "$limit" mpirun -np 1 "${run[@]}" --steps 1000000 --every 1000000 : -np 1 ./victim.sh "${run[@]}" --steps 1000000 \
    > "$tmp/kill.log" 2>&1 &
  job=$!
  for _ in $(seq 100); do [ -s victim.pid ] && break; sleep 0.2; done
  sleep 2
  kill -9 "$(cat victim.pid)"
  wait "$job" || rc=$?
  [ "$rc" -ne 124 ] || fail "after a rank was killed, the run was still going after $limit s"
  [ "$rc" -ne 0 ] || fail "a rank was killed, yet the run exited 0"
  echo "failing_rank: a damaged checkpoint on rank 0 ends all ranks with the reason (on rank 1 it is not read); a killed rank ends the run (status $rc)"
  ;;
deadline)
  # A rank that stops (kill -STOP) mid-run: the others wait at the next
  # collective without spinning a core, and past the deadline (--dist-timeout,
  # or TG_DIST_TIMEOUT) each exits non-zero naming the rank that did not
  # arrive. Three ranks, rank 1 stopped; the deadline from the flag, then
  # from the environment.
  printf '#!/bin/sh\necho $$ > "%s/pid.$1"\nshift\nexec "$@"\n' "$tmp" > pid.sh
  chmod +x pid.sh
  # --every 1: rank 0's progress lines fill its output buffer soon, so the
  # log shows when training runs
  run=("$spiral" --norm rmsnorm --steps 1000000 --every 1 --out o)
  for how in flag env; do
    rm -f pid.0 pid.1
    deadline=(--dist-timeout 4) envs=()
    if [ "$how" = env ]; then deadline=() envs=(TG_DIST_TIMEOUT=4); fi
    rc=0 t0=$(date +%s)
    timeout "$limit" env "${envs[@]}" mpirun -np 1 ./pid.sh 0 "${run[@]}" "${deadline[@]}" : -np 1 ./pid.sh 1 "${run[@]}" \
      "${deadline[@]}" : -np 1 "${run[@]}" "${deadline[@]}" > "$tmp/$how.log" 2>&1 &
    job=$!
    # stopped once training runs (the deadline covers the collectives
    # after tg_dist_init, not MPI's own start-up)
    for _ in $(seq 1200); do grep -q "step [0-9]*/1000000 " "$tmp/$how.log" && [ -s pid.1 ] && break; sleep 0.1; done
    sleep 1
    kill -STOP "$(cat pid.1)"
    # rank 0 waits at the next collective: its CPU time over 2 s of waiting
    sleep 0.5
    cpu() { awk '{print $14 + $15}' "/proc/$(cat pid.0)/stat"; }
    c0=$(cpu)
    sleep 2
    c1=$(cpu)
    wait "$job" || rc=$?
    kill -9 "$(cat pid.1)" 2> /dev/null || true
    took=$(( $(date +%s) - t0 ))
    [ "$rc" -ne 124 ] || { cat "$tmp/$how.log" >&2; fail "$how: a stopped rank hung the job for $limit s"; }
    [ "$rc" -ne 0 ] || { cat "$tmp/$how.log" >&2; fail "$how: a rank stopped, yet the run exited 0"; }
    ticks=$(getconf CLK_TCK)
    awk -v d=$((c1 - c0)) -v t="$ticks" 'BEGIN {exit !(d / t < 0.2)}' \
      || fail "$how: rank 0 used $((c1 - c0)) ticks of $ticks/s in 2 s of waiting: it spins"
    [ "$(grep -c "spiral: error: .*rank 1 did not arrive within 4 s" "$tmp/$how.log")" -eq 2 ] \
      || { cat "$tmp/$how.log" >&2; fail "$how: ranks 0 and 2 did not both name rank 1"; }
    [ "$took" -lt 60 ] || fail "$how: the job took $took s to end after a 4 s deadline"
  done
  echo "deadline: a stopped rank ends the job (status $rc, ${took} s) with its rank named by the others; waiting uses $((c1 - c0)) ticks in 2 s"
  ;;
mixed_builds)
  # Rank 0 from this build, rank 1 from a portable build of the same
  # sources (-DTG_NATIVE=OFF: other GEMM kernels, other rounding): refused
  # by both at the start, each naming the two builds, instead of a run that
  # matches no one-process run. On a CPU without AVX2 the two builds would
  # be the same; then there is nothing to refuse.
  if ! grep -qw avx2 /proc/cpuinfo; then echo "mixed_builds: no AVX2 here: the native build is the portable one"; echo "1 passed, 0 failed"; exit 0; fi
  "$TG_CMAKE" -S "$src" -B portable -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-O1 -DTG_NATIVE=OFF \
    -DTG_MPI=ON -DCMAKE_C_COMPILER="$TG_CC" > build.log 2>&1 || { cat build.log >&2; fail "configuring a portable build"; }
  "$TG_CMAKE" --build portable -j2 --target spiral >> build.log 2>&1 || { cat build.log >&2; fail "building it"; }
  run=(--norm none --steps 5 --out o)
  expect 0 "$tmp/p.log" mpirun -np 2 portable/examples/spiral --norm none --steps 5 --out p
  # mpirun kills the other ranks when one exits non-zero (here the fast
  # portable rank would end the slow one, say under ASan, before it
  # printed); with that off it waits for both, and returns 0, so each rank
  # writes its own exit status.
  OMPI_MCA_orte_abort_on_non_zero_status=0 expect 0 "$tmp/log" \
    mpirun -np 1 sh -c "$spiral ${run[*]}; echo \$? > rc0" : -np 1 sh -c "portable/examples/spiral ${run[*]}; echo \$? > rc1"
  [ "$(cat rc0 rc1 | tr '\n' ' ')" = "1 1 " ] || { cat "$tmp/log" >&2; fail "exit statuses $(cat rc0 rc1 | tr '\n' ' '), want 1 1"; }
  [ "$(grep -c "tg_dist_init: the ranks run different builds.*rank 0 runs tapegrad.*GEMM kernels .*rank 1 runs tapegrad .*GEMM kernels portable" "$tmp/log")" -eq 2 ] \
    || { cat "$tmp/log" >&2; fail "the two ranks did not both refuse, naming the builds"; }
  [ ! -e o ] || fail "a refused run wrote output"
  echo "mixed_builds: $(grep -m1 -o "rank 1 runs.*GEMM kernels portable" "$tmp/log")"
  ;;
flags_differ)
  # Ranks given different --steps would make different numbers of steps
  # and wait for each other forever: refused at the start, by every rank.
  expect 1 "$tmp/log" mpirun -np 1 "$spiral" --norm none --steps 20 --out o : -np 1 "$spiral" --norm none --steps 30 --out o
  [ "$(grep -c "tg_dist_same: the flags (--steps.*) differ between the ranks" "$tmp/log")" -eq 2 ] \
    || fail "not both ranks refused: $(cat "$tmp/log")"
  # --out, --save, --every and --threads may differ (only rank 0 uses the first two)
  expect 0 "$tmp/log" mpirun -np 1 "$spiral" --norm none --steps 5 --out o --every 1 : -np 1 "$spiral" --norm none \
    --steps 5 --out p --threads 1
  echo "flags_differ: different --steps refused by both ranks; --out, --every and --threads may differ"
  ;;
rank0_output)
  # Three processes: one copy of the output on stdout, and files only from
  # rank 0 (ranks 1 and 2 are given another --out and --save, which they
  # must not touch).
  expect 0 "$tmp/log" mpirun -np 1 "$spiral" --norm all --steps 20 --save a.st --out a : \
    -np 2 "$spiral" --norm all --steps 20 --save other.st --out other
  [ "$(grep -c "^== spiral --norm" "$tmp/log")" -eq 3 ] || fail "the models' headers are not printed once each"
  [ "$(grep -c "^saved the training state" "$tmp/log")" -eq 1 ] || fail "not one save message"
  [ "$(grep -c "^norm  *final loss" "$tmp/log")" -eq 1 ] || fail "not one final table"
  [ -s a.st ] && [ -s a/loss_none.dat ] && [ -s a/regions_layernorm.dat ] || fail "rank 0 wrote no state or logs"
  [ ! -e other.st ] && [ ! -e other ] || fail "ranks 1 and 2 wrote files"
  [ "$(awk '!/^#/' a/loss_rmsnorm.dat | wc -l)" -eq 20 ] || fail "the loss log does not have 20 rows"
  echo "rank0_output: one copy of the output, files only from rank 0"
  ;;
installed)
  # A user's program against a fresh install: built with
  # `pkg-config tapegrad-dist`, run as one process and (MPI) as two.
  # shellcheck source=tests/install/prefix.sh
  . "$src/tests/install/prefix.sh"
  install_prefix "$build" "$tmp/prefix"
  # shellcheck disable=SC2046  # pkg-config's words are meant to split
  "$TG_CC" "${extra[@]}" -std=c11 -Wall -Wextra -Wpedantic -Werror "$src/tests/dist/hello_dist.c" \
    $(pkg-config --cflags --libs tapegrad-dist) -o hello || fail "hello_dist.c does not build with pkg-config tapegrad-dist"
  expect 0 "$tmp/one.log" ./hello
  grep -qx "1 processes, sum 1" "$tmp/one.log" || fail "one process: $(cat "$tmp/one.log")"
  if [ "$mpi" = 1 ]; then
    expect 0 "$tmp/two.log" mpirun -np 2 ./hello
    grep -qx "2 processes, sum 3" "$tmp/two.log" || fail "two processes: $(cat "$tmp/two.log")"
  fi
  echo "installed: a program built with pkg-config tapegrad-dist runs ($(cat "$tmp/one.log"))"
  ;;
readme_mpi)
  # The spiral recipe of docs/distributed.md, run as printed, says the two runs are the same
  # bit for bit.
  readme readme_mpi
  grep -q "mpirun -np 2 build/examples/spiral" readme_mpi.sh || fail "no mpirun recipe for spiral in docs/distributed.md"
  echo "readme_mpi: the recipe ran as printed: $(grep "bit for bit" "$tmp/readme_mpi.log")"
  ;;
gpt_micro)
  # One process, a global batch of 7 windows in micro-batches: --micro 1
  # is the default run, --micro 3 resumes bit for bit and is another
  # rounding of the same run, splits that cannot be made are refused.
  expect 0 "$tmp/d.log" "$gpt" "${small[@]}" --steps 20 --save d.st --out d
  expect 0 "$tmp/m1.log" "$gpt" "${small[@]}" --steps 20 --micro 1 --save m1.st --out m1
  same_gpt d m1 "--micro 1 and the default"
  if grep -q "micro-batch" "$tmp/d.log"; then fail "one process, one micro-batch: says more than before"; fi
  expect 0 "$tmp/a.log" "$gpt" "${small[@]}" --steps 20 --micro 3 --save a.st --out a
  grep -q "a global batch of 7 windows in 3 micro-batches" "$tmp/a.log" || fail "--micro 3: the split is not said"
  if cmp -s d.st a.st; then fail "1 and 3 micro-batches gave the same bits: is anything split?"; fi
  read -r _ x < <(losses d/train.dat)
  read -r _ y < <(losses a/train.dat)
  awk -v a="$x" -v b="$y" 'BEGIN {d = a - b; exit !(d < 1e-3 && d > -1e-3)}' || fail "1 vs 3 micro-batches: losses $x and $y"
  expect 0 "$tmp/h.log" "$gpt" "${small[@]}" --steps 20 --micro 3 --stop-after 10 --save h.st --out b
  expect 0 "$tmp/r.log" "$gpt" "${small[@]}" --steps 20 --micro 3 --resume h.st --save b.st --out b
  same_gpt a b "--micro 3, resumed at step 10"
  expect 2 "$tmp/e.log" "$gpt" "${small[@]}" --steps 5 --batch 2 --micro 3 --out e
  grep -q "a batch of 2 windows cannot make 3 micro-batches" "$tmp/e.log" || fail "--batch 2 --micro 3: $(cat "$tmp/e.log")"
  expect 2 "$tmp/e.log" "$gpt" "${small[@]}" --steps 5 --micro 0 --out e
  grep -q "\-\-micro 0 must be in 1..1000000" "$tmp/e.log" || fail "--micro 0: $(cat "$tmp/e.log")"
  [ ! -e e ] || fail "a refused run wrote output"
  echo "gpt_micro: --micro 1 is the default, --micro 3 (losses $x and $y) resumes bit for bit; bad splits refused"
  ;;
gpt_bitwise)
  # P processes of 1 thread against one process of 2 threads with
  # --micro P: the same state and losses, bit for bit -- slices of 7, 3+4,
  # 2+2+3 windows; GPT-2 (its embedding tied as the output layer: one
  # parameter, two gradient terms) in f64 with 2. The 2-process run gives
  # rank 1 another --out and --save, which it must not touch.
  for np in 1 2 3; do
    expect 0 "$tmp/m$np.log" mpirun -np "$np" "$gpt" "${small[@]}" --steps 20 --threads 1 --save "m$np.st" --out "m$np"
    expect 0 "$tmp/s$np.log" "$gpt" "${small[@]}" --steps 20 --micro "$np" --threads 2 --save "s$np.st" --out "s$np"
    same_gpt "m$np" "s$np" "$np processes vs --micro $np"
  done
  grep -q "gpt: 3 processes (.*), 1 thread each; a global batch of 7 windows in 3 micro-batches" "$tmp/m3.log" \
    || fail "the 3-process run does not say how it ran: $(grep "^gpt:" "$tmp/m3.log")"
  if cmp -s m1.st m2.st; then fail "1 and 2 processes gave the same bits: is anything split?"; fi
  f64=(--arch gpt2 --dtype f64 --steps 12)
  expect 0 "$tmp/g.log" mpirun -np 1 "$gpt" "${small[@]}" "${f64[@]}" --save g.st --out g : \
    -np 1 "$gpt" "${small[@]}" "${f64[@]}" --save other.st --out other
  expect 0 "$tmp/h.log" "$gpt" "${small[@]}" "${f64[@]}" --micro 2 --save h.st --out h
  same_gpt g h "gpt2 in f64, 2 processes vs --micro 2"
  [ ! -e other.st ] && [ ! -e other ] || fail "rank 1 wrote files"
  [ "$(grep -c "^saved the training state" "$tmp/g.log")" -eq 1 ] || fail "not one save message"
  [ "$(grep -c "^GPT(arch=gpt2" "$tmp/g.log")" -eq 1 ] || fail "the model is not printed once"
  echo "gpt_bitwise: 1-3 processes == 1 process with as many micro-batches (states and losses, bit for bit); only rank 0 writes"
  ;;
gpt_resume)
  # Stop after 10 of 20 steps on 2 processes, then resume: on 2 it is one
  # straight run; on 1 (one micro-batch) it is one process that ran the
  # first half with --micro 2 and resumed without.
  expect 0 "$tmp/f.log" mpirun -np 2 "$gpt" "${small[@]}" --steps 20 --save full.st --out full
  expect 0 "$tmp/h.log" mpirun -np 2 "$gpt" "${small[@]}" --steps 20 --stop-after 10 --save half.st --out half
  cp -r half two && cp -r half one
  # rank 1 runs in a folder with its own copy of the text but no
  # checkpoint (no shared file system): it receives rank 0's state
  mkdir elsewhere && cp text.txt elsewhere/
  expect 0 "$tmp/r2.log" mpirun -np 1 "$gpt" "${small[@]}" --steps 20 --resume half.st --save two.st --out two : \
    -np 1 -wdir "$tmp/elsewhere" "$gpt" "${small[@]}" --steps 20 --resume half.st --out two
  grep -q "resumed from half.st at step 10" "$tmp/r2.log" || fail "2 processes did not resume at step 10"
  same_gpt full two "2 processes, resumed with 2"
  expect 0 "$tmp/r1.log" "$gpt" "${small[@]}" --steps 20 --resume half.st --save one.st --out one
  grep -q "resumed from half.st at step 10" "$tmp/r1.log" || fail "1 process did not resume at step 10"
  expect 0 "$tmp/s.log" "$gpt" "${small[@]}" --steps 20 --micro 2 --stop-after 10 --save s-half.st --out s
  same half.st s-half.st "2 processes vs --micro 2 after 10 steps"
  expect 0 "$tmp/s1.log" "$gpt" "${small[@]}" --steps 20 --resume s-half.st --save s.st --out s
  grep -q "^gpt: note: half.st was trained with each batch's gradient summed over 2 slices, this run sums it over 1" "$tmp/r1.log" \
    || fail "2 -> 1 process: no note that it rounds otherwise: $(cat "$tmp/r1.log")"
  if grep -q "note: " "$tmp/r2.log"; then fail "2 -> 2 processes printed a note"; fi
  same_gpt one s "resumed with 1 process vs --micro 2 then 1"
  echo "gpt_resume: 2 -> 2 processes is one straight run (the checkpoint on rank 0 alone); 2 -> 1 process == --micro 2 -> --micro 1"
  ;;
gpt_failing)
  # What would make the ranks train different things, or wait forever,
  # ends every rank at the start with the reason: a damaged checkpoint (on
  # rank 0, the one that reads it), another text on rank 1, other flags on rank 1, a batch too
  # small for the processes. None writes anything.
  "$gpt" "${small[@]}" --steps 20 --stop-after 10 --save good.st --out g > /dev/null
  head -c 100 good.st > bad.st
  run=("$gpt" "${small[@]}" --steps 20 --out o)
  expect 1 "$tmp/ckpt.log" mpirun -np 1 "${run[@]}" --resume bad.st : -np 1 "${run[@]}" --resume good.st
  reason="tg_ckpt_load_ex: bad.st: header length"
  [ "$(grep -c "^gpt: error: $reason" "$tmp/ckpt.log")" -eq 1 ] || fail "rank 0 did not say why: $(cat "$tmp/ckpt.log")"
  grep -q "^gpt: error: tg_dist_agree: rank 0 failed: $reason" "$tmp/ckpt.log" \
    || fail "rank 1 did not name rank 0 and its reason: $(cat "$tmp/ckpt.log")"
  sed 's/cat/dog/' text.txt > other.txt
  expect 1 "$tmp/text.log" mpirun -np 1 "${run[@]}" : -np 1 "${run[@]}" --data other.txt
  [ "$(grep -c "tg_dist_same: the texts (--data) differ between the ranks" "$tmp/text.log")" -eq 2 ] \
    || fail "not both ranks refused different texts: $(cat "$tmp/text.log")"
  expect 1 "$tmp/flags.log" mpirun -np 1 "${run[@]}" : -np 1 "${run[@]}" --micro 2
  [ "$(grep -c "tg_dist_same: the flags (--steps.*--micro.*) differ between the ranks" "$tmp/flags.log")" -eq 2 ] \
    || fail "not both ranks refused different flags: $(cat "$tmp/flags.log")"
  expect 2 "$tmp/batch.log" mpirun -np 3 "${run[@]}" --batch 2
  grep -q "a batch of 2 windows cannot make 3 micro-batches (3 processes x --micro 1)" "$tmp/batch.log" \
    || fail "--batch 2 on 3 processes: $(cat "$tmp/batch.log")"
  [ ! -e o ] || fail "a refused run wrote output"
  echo "gpt_failing: a damaged checkpoint, another text or other flags on rank 1, a batch too small end every rank with the reason"
  ;;
save_every)
  # --save into a folder that does not exist is refused before step 1 (by
  # spiral, gpt and charlm), and gpt's --save-every N saves every N steps:
  # a run killed (kill -9) after some saves resumes from the last one and
  # ends bitwise where an uninterrupted run ends. With MPI, on 2 processes.
  printf 'apple\nbanana\ncherry\ndates\nelder\nfig\ngrape\n' > words.txt
  expect 1 "$tmp/s.log" "$spiral" --steps 5 --save nodir/x.st --out o
  expect 1 "$tmp/g.log" "$gpt" "${small[@]}" --steps 5 --save nodir/x.st --out o
  expect 1 "$tmp/c.log" "$build/examples/charlm" --data words.txt --steps 5 --save nodir/x.st --out o
  for p in s g c; do
    grep -q -- "--save nodir/x.st: cannot write into the folder nodir: No such file or directory" "$tmp/$p.log" \
      || fail "--save into a missing folder: $(cat "$tmp/$p.log")"
  done
  [ ! -e o ] || fail "a run refused for its --save wrote output"
  launch=() np=1
  if [ "$mpi" = 1 ]; then launch=(mpirun -np 2) np=2; fi
  expect 1 "$tmp/m.log" "${launch[@]}" "$gpt" "${small[@]}" --steps 5 --save nodir/x.st --out o
  grep -q "cannot write into the folder nodir" "$tmp/m.log" || fail "$np processes, a missing folder: $(cat "$tmp/m.log")"
  printf '#!/bin/sh\necho $$ > "%s/pid"\nexec "$@"\n' "$tmp" > pid.sh
  chmod +x pid.sh
  run=("$gpt" "${small[@]}" --steps 100000 --every 100000 --eval-every 100000)
  if [ "$mpi" = 1 ]; then
    timeout "$limit" mpirun -np 1 ./pid.sh "${run[@]}" --save-every 20 --save p.st --out k : -np 1 "${run[@]}" \
      --save-every 20 > "$tmp/k.log" 2>&1 &
  else
    timeout "$limit" ./pid.sh "${run[@]}" --save-every 20 --save p.st --out k > "$tmp/k.log" 2>&1 &
  fi
  job=$!
  for _ in $(seq 600); do grep -q "^step 40: saved the training state to p.st" "$tmp/k.log" && break; sleep 0.1; done
  kill -9 "$(cat pid)"
  wait "$job" || true
  last=$(grep -o "^step [0-9]*: saved" "$tmp/k.log" | tail -1 | grep -o "[0-9]*")
  [ -n "$last" ] && [ "$last" -ge 40 ] || { cat "$tmp/k.log" >&2; fail "no save every 20 steps"; }
  stop=$((last + 27)) # past the save after $last too, which a kill can leave unannounced
  expect 0 "$tmp/r.log" "${launch[@]}" "${run[@]}" --stop-after "$stop" --resume p.st --save r.st --out r
  expect 0 "$tmp/f.log" "${launch[@]}" "${run[@]}" --stop-after "$stop" --save f.st --out f
  same r.st f.st "killed after the save at step $last, resumed to step $stop"
  echo "save_every: --save into a missing folder refused at the start; $np process(es) killed after step $last's save resume bit for bit to step $stop"
  ;;
gpt_readme)
  # The gpt recipe of docs/distributed.md (on the fortunes), run as printed.
  readme gpt_readme
  grep -q "mpirun -np 2 build/examples/gpt" gpt_readme.sh || fail "no mpirun recipe for gpt in docs/distributed.md"
  echo "gpt_readme: the recipe ran as printed: $(grep "bit for bit" "$tmp/gpt_readme.log")"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "1 passed, 0 failed"
