#!/usr/bin/env bash
# The user-build rows of `make bench` (scripts/bench.sh): bench_user_build
# from the default build and from the Release build, alternating RUNS times
# (default 3), then per dtype the median step time of each build, their
# ratio (target <= 1.1) and the page faults per step after warm-up (target:
# flat, < 1). Prints a table and writes JSON.
#
# Usage: scripts/bench_user_build.sh DEFAULT_BUILD RELEASE_BUILD THREADS JSON
set -euo pipefail
default_build=$1 release_build=$2 threads=$3 json=$4
runs=${RUNS:-3}
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for ((r = 0; r < runs; r++)); do
  for b in "$default_build" "$release_build"; do
    "$b/bench/bench_user_build" --threads "$threads" | sed "s|^|$b |" >>"$lines"
  done
done
awk -v def="$default_build" -v rel="$release_build" -v json="$json" -v threads="$threads" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    b = $1; dt = $3; split($5, ms, "="); split($6, pf, "="); split($4, ck, "=")
    key = b SUBSEP dt
    times[key] = times[key] " " ms[2]; faults[key] = faults[key] " " pf[2]; checked[b] = ck[2]
    if (!(dt in seen)) { seen[dt] = 1; order[++nd] = dt }
  }
  END {
    printf "%-9s %22s %22s %7s %s\n", "dtype", def " ms/step (faults)", rel " ms/step (faults)", "ratio", "target <= 1.1"
    printf("{\"threads\": %d, \"default_build\": \"%s\", \"default_checked\": %s, \"release_build\": \"%s\", \"rows\": [", threads, def, (checked[def] ? "true" : "false"), rel) > json
    for (i = 1; i <= nd; i++) {
      dt = order[i]
      td = median(times[def SUBSEP dt]); tr = median(times[rel SUBSEP dt])
      fd = median(faults[def SUBSEP dt]); fr = median(faults[rel SUBSEP dt])
      ratio = td / tr
      printf("%-9s %14.1f (%5.1f) %14.1f (%5.1f) %6.2fx %s\n", dt, td, fd, tr, fr, ratio, (ratio <= 1.1 ? "met" : "MISSED"))
      printf("%s{\"dtype\": \"%s\", \"default_ms\": %.3f, \"release_ms\": %.3f, \"ratio\": %.4f, \"default_faults_per_step\": %.1f, \"release_faults_per_step\": %.1f}", (i > 1 ? ", " : ""), dt, td, tr, ratio, fd, fr) > json
    }
    print "]}" > json
  }' "$lines"
