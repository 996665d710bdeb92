#!/usr/bin/env bash
# The libraries export exactly their API (docs/DESIGN.md, "What a library
# exports"). They are compiled with hidden visibility and TG_API
# (include/tapegrad/tensor.h) marks the public declarations, so a function
# of the API is GLOBAL with DEFAULT visibility, and any other function a
# library shares between its files is GLOBAL HIDDEN. For each library
# given, this test compares both ways:
#   declared  the functions its public headers declare, as GCC's -aux-info
#             lists them for a file that includes every header under
#             include/ (static inline functions excluded): check.h is
#             tapegrad_check's, dist.h tapegrad_dist's, the others tapegrad's;
#   exported  the functions its archive defines as GLOBAL DEFAULT
#             (readelf -sW), or its shared object's dynamic symbols.
# libtapegrad also exports its TG_FRIEND functions (tensor/internal.h): the
# internal ones tapegrad_check and tapegrad_dist call. When those two are
# given, the list must be exact: each friend is called by one of them, and
# they call no hidden function of libtapegrad (a shared libtapegrad_check
# calling one would not load).
# Each difference is named with its header line or its object file.
# Usage: exports.sh SOURCE_DIR CC NAME=LIBRARY...
#   NAME is tapegrad, check or dist; LIBRARY its .a or .so. Exits 77 (ctest
#   skips the test) when neither CC nor gcc takes -aux-info.
set -euo pipefail
export LC_ALL=C # one sort order for sort, join and comm
usage="usage: exports.sh SOURCE_DIR CC NAME=LIBRARY..."
src=$(cd "${1:?$usage}" && pwd)
cc=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
command -v readelf > /dev/null || { echo "exports: readelf (binutils) not found" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The library a public header belongs to.
library_of_header() {
  case $1 in
    include/tapegrad/check.h) echo check ;;
    include/tapegrad/dist.h) echo dist ;;
    *) echo tapegrad ;;
  esac
}
libfile() { case $1 in tapegrad) echo libtapegrad ;; *) echo "libtapegrad_$1" ;; esac; }
# The function a declaration names: the identifier before the first "(",
# once a function-pointer return's "(*" is dropped.
name_of_declaration() { sed -E 's/\(\*//; s/^[^(]*[ *]([A-Za-z_][A-Za-z0-9_]*) ?\(.*/\1/'; }

# ---- declared: every public header, through -aux-info ------------------------------
{
  echo '#include "tapegrad.h"'
  for h in "$src"/include/tapegrad/*.h; do echo "#include \"tapegrad/${h##*/}\""; done
} > "$work/all.c"
aux_ok=""
for c in "$cc" gcc; do
  if "$c" -std=c11 -I"$src/include" -fsyntax-only -aux-info "$work/api.aux" "$work/all.c" 2> "$work/cc.err"; then
    aux_ok=$c
    break
  fi
done
if [ -z "$aux_ok" ]; then
  echo "exports: skipped: neither $cc nor gcc takes -aux-info"
  cat "$work/cc.err"
  exit 77
fi
# "/* /src/include/tapegrad/tensor.h:105:NC */ extern tg_ctx *tg_ctx_new (uint64_t);"
# -> "tapegrad tg_ctx_new include/tapegrad/tensor.h:105"
: > "$work/declared"
while IFS= read -r line; do
  loc=${line#/\* }
  loc=${loc%%:[A-Z][A-Z] \*/*}
  case $loc in "$src"/include/*) ;; *) continue ;; esac
  proto=${line#*\*/ }
  case $proto in static*) continue ;; esac # static inline: not a symbol
  file=${loc#"$src"/}
  echo "$(library_of_header "${file%:*}") $(name_of_declaration <<< "$proto") $file" >> "$work/declared"
done < "$work/api.aux"

# ---- friends: TG_FRIEND declarations in libtapegrad's internal headers ----------------
# "tg_tape_stash autograd/tape.h:74"
(cd "$src" && grep -n '^TG_FRIEND ' tensor/*.h autograd/*.h layers/*.h optim/*.h io/*.h train/*.h 2> /dev/null || true) |
  while IFS=: read -r file line decl; do
    echo "$(name_of_declaration <<< "$decl") $file:$line"
  done | sort > "$work/friends"

# ---- exported: the GLOBAL DEFAULT functions each library defines ---------------------
# "NAME FILE" per line, FILE the archive member that defines NAME (or the
# shared object). MODE: exported (GLOBAL DEFAULT functions: the dynamic
# symbols of a .so), variables (GLOBAL DEFAULT data), internal (any other
# function it defines), undefined (what it calls in other libraries).
symbols() { # LIBRARY MODE
  local opt=-sW
  case $1:$2 in *.so*:exported | *.so*:variables | *.so*:undefined) opt=--dyn-syms ;; esac
  readelf $opt -W "$1" | awk -v mode="$2" -v member="${1##*/}" '
    /^File: / { member = $2; sub(/^[^(]*\(/, "", member); sub(/\)$/, "", member) }
    NF < 8 || $8 == "_init" || $8 == "_fini" { next } # entry points of any shared object
    { exported = ($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT"; name = $8; sub(/@.*/, "", name) }
    $7 == "UND" { if (mode == "undefined" && $5 == "GLOBAL") print name, member; next }
    mode == "exported" && $4 == "FUNC" && exported ||
    mode == "variables" && $4 == "OBJECT" && exported ||
    mode == "internal" && $4 == "FUNC" && !exported { print name, member }' | sort -u
}

libs=""
for arg in "$@"; do
  lib=${arg%%=*} path=${arg#*=}
  case $lib in tapegrad | check | dist) ;; *) echo "exports: unknown library '$lib' (tapegrad, check or dist)" >&2; exit 2 ;; esac
  [ -f "$path" ] || { echo "exports: $path not found (build the library first)" >&2; exit 2; }
  libs="$libs $lib"
  for mode in exported internal variables undefined; do symbols "$path" $mode > "$work/$mode.$lib"; done
  awk -v lib="$lib" '$1 == lib { print $2 }' "$work/declared" | sort -u > "$work/want.$lib"
  [ "$lib" != tapegrad ] || cut -d' ' -f1 "$work/friends" >> "$work/want.$lib"
  sort -u -o "$work/want.$lib" "$work/want.$lib"
  cut -d' ' -f1 "$work/exported.$lib" | sort -u > "$work/have.$lib"
done

status=0
for lib in $libs; do
  bad=0
  while read -r name; do
    where=$(awk -v n="$name" '$2 == n { print $3; exit }' "$work/declared")
    [ -n "$where" ] || where=$(awk -v n="$name" '$1 == n { print $2 " (TG_FRIEND)"; exit }' "$work/friends")
    why="add TG_API to the declaration"
    case $where in *TG_FRIEND*) why="the file defining it does not include that declaration" ;; esac
    grep -q "^$name " "$work/internal.$lib" || why="no file of $(libfile "$lib") defines it"
    for other in $libs; do
      if [ "$other" != "$lib" ] && grep -q "^$name " "$work/exported.$other"; then
        why="$(libfile "$other") defines it: declare it in that library's header"
      fi
    done
    echo "declared, not exported by $(libfile "$lib"): $name ($where: $why)"
    bad=1
  done < <(comm -23 "$work/want.$lib" "$work/have.$lib")
  while read -r name; do
    obj=$(awk -v n="$name" '$1 == n { print $2; exit }' "$work/exported.$lib")
    echo "exported by $(libfile "$lib"), not declared in its headers: $name ($obj: make it static," \
         "or declare it with TG_API in a public header)"
    bad=1
  done < <(comm -13 "$work/want.$lib" "$work/have.$lib")
  while read -r name obj; do
    echo "exported variable in $(libfile "$lib"): $name ($obj: the API has no variables; make it static)"
    bad=1
  done < "$work/variables.$lib"
  if [ $bad = 0 ]; then
    n=$(wc -l < "$work/have.$lib") friends=""
    if [ "$lib" = tapegrad ] && [ -s "$work/friends" ]; then
      nf=$(wc -l < "$work/friends")
      n=$((n - nf)) friends=" and its $nf TG_FRIEND functions"
    fi
    echo "exports: $(libfile "$lib") exports its $n API functions$friends, nothing else"
  fi
  [ $bad = 0 ] || status=1
done

# ---- friends: what check/ and data_parallel/ call of libtapegrad's hidden functions -------------
case " $libs " in *" tapegrad "*) ;; *) exit $status ;; esac
siblings=""
for lib in check dist; do case " $libs " in *" $lib "*) siblings="$siblings $lib" ;; esac; done
: > "$work/called"
for lib in $siblings; do
  # "NAME OBJ1,OBJ2" for each hidden function of libtapegrad the library calls
  join "$work/undefined.$lib" "$work/internal.tapegrad" | cut -d' ' -f1,2 |
    awk '{ if ($1 in objs) objs[$1] = objs[$1] ", " $2; else objs[$1] = $2 } END { for (n in objs) print n, objs[n] }' | sort |
    while read -r name objs; do
      grep -q "^$name " "$work/friends" && continue
      fix="declare it TG_FRIEND (tensor/friend.h) or call the API"
      where=$(awk -v n="$name" '$2 == n { print $3; exit }' "$work/declared")
      [ -z "$where" ] || fix="add TG_API to its declaration ($where)"
      echo "$(libfile "$lib") ($objs) calls $name, hidden in libtapegrad: a shared $(libfile "$lib")" \
           "would not load; $fix"
    done
  cut -d' ' -f1 "$work/undefined.$lib" >> "$work/called"
done > "$work/hidden_calls"
if [ -s "$work/hidden_calls" ]; then cat "$work/hidden_calls"; status=1; fi
if [ "$siblings" = " check dist" ]; then
  sort -u -o "$work/called" "$work/called"
  while read -r name where; do
    if ! grep -qx "$name" "$work/called"; then
      echo "TG_FRIEND $name ($where) is called by neither libtapegrad_check nor libtapegrad_dist: drop TG_FRIEND"
      status=1
    fi
  done < "$work/friends"
fi
exit $status
