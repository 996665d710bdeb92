#!/usr/bin/env bash
# The libraries export exactly their API (docs/DESIGN.md, "What a library
# exports"). They are compiled with hidden visibility, and TG_API
# (include/tapegrad/tensor.h) marks the public declarations, so a function
# of the API is GLOBAL with DEFAULT visibility and every other function the
# library shares between its files is GLOBAL HIDDEN. This test compares,
# for each library given, both ways:
#   declared  the functions its public headers declare, as GCC's -aux-info
#             lists them for a file that includes every header under
#             include/ (static inline functions excluded): check.h is
#             tapegrad_check's, dist.h tapegrad_dist's, the others tapegrad's;
#   exported  the functions its archive defines as GLOBAL DEFAULT
#             (readelf -sW), or its shared object's dynamic symbols.
# A declared function that is not exported lacks TG_API (or is defined
# nowhere, or in another library); an exported one that is not declared
# misses `static`, or a declaration in a public header. Each is named with
# its header line or its object file.
# Usage: exports.sh SOURCE_DIR CC NAME=LIBRARY...
#   NAME is tapegrad, check or dist; LIBRARY its .a or .so. Exits 77 (ctest
#   skips the test) when neither CC nor gcc takes -aux-info.
set -euo pipefail
export LC_ALL=C # one sort order for sort and comm
src=$(cd "${1:?usage: exports.sh SOURCE_DIR CC NAME=LIBRARY...}" && pwd)
cc=${2:?usage: exports.sh SOURCE_DIR CC NAME=LIBRARY...}
shift 2
[ $# -gt 0 ] || { echo "usage: exports.sh SOURCE_DIR CC NAME=LIBRARY..." >&2; exit 2; }
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
# -> "tg_ctx_new include/tapegrad/tensor.h:105". The name is the identifier
# before the first " (" once a function-pointer return's "(*" is dropped.
: > "$work/declared"
while IFS= read -r line; do
  loc=${line#/\* }
  loc=${loc%%:[A-Z][A-Z] \*/*}
  case $loc in "$src"/include/*) ;; *) continue ;; esac
  proto=${line#*\*/ }
  case $proto in static*) continue ;; esac # static inline, not a symbol
  name=$(sed -E 's/\(\*//; s/^[^(]*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*/\1/' <<< "$proto")
  file=${loc#"$src"/}
  echo "$(library_of_header "${file%:*}") $name $file" >> "$work/declared"
done < "$work/api.aux"

# ---- exported: the GLOBAL DEFAULT functions each library defines ---------------------
# "NAME FILE" per line, FILE the archive member that defines NAME (or the
# shared object). MODE: exported (GLOBAL DEFAULT functions: the dynamic
# symbols of a .so), variables (GLOBAL DEFAULT data), internal (any other
# function the library defines).
defined_symbols() { # LIBRARY MODE
  local opt=-sW
  case $1:$2 in *.so:exported | *.so.*:exported | *.so:variables | *.so.*:variables) opt=--dyn-syms ;; esac
  readelf $opt -W "$1" | awk -v mode="$2" -v member="${1##*/}" '
    /^File: / { member = $2; sub(/^[^(]*\(/, "", member); sub(/\)$/, "", member) }
    NF < 8 || $7 == "UND" { next }
    { exported = ($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" }
    $8 == "_init" || $8 == "_fini" { next } # entry points of any shared object
    mode == "exported" && $4 == "FUNC" && exported ||
    mode == "variables" && $4 == "OBJECT" && exported ||
    mode == "internal" && $4 == "FUNC" && !exported { name = $8; sub(/@.*/, "", name); print name, member }' | sort -u
}

libs=""
for arg in "$@"; do
  lib=${arg%%=*} path=${arg#*=}
  case $lib in tapegrad | check | dist) ;; *) echo "exports: unknown library '$lib' (tapegrad, check or dist)" >&2; exit 2 ;; esac
  [ -f "$path" ] || { echo "exports: $path not found (build the library first)" >&2; exit 2; }
  libs="$libs $lib"
  defined_symbols "$path" exported > "$work/exported.$lib"
  defined_symbols "$path" internal > "$work/internal.$lib"
  defined_symbols "$path" variables > "$work/variables.$lib"
  awk -v lib="$lib" '$1 == lib { print $2 }' "$work/declared" | sort -u > "$work/want.$lib"
  cut -d' ' -f1 "$work/exported.$lib" | sort -u > "$work/have.$lib"
done

# lib name -> file name
libfile() { case $1 in tapegrad) echo libtapegrad ;; *) echo "libtapegrad_$1" ;; esac; }

status=0
for lib in $libs; do
  bad=0
  while read -r name; do
    where=$(awk -v n="$name" '$2 == n { print $3; exit }' "$work/declared")
    why="add TG_API to the declaration"
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
    echo "exports: $(libfile "$lib") exports its $(wc -l < "$work/have.$lib") declared functions and nothing else"
  fi
  [ $bad = 0 ] || status=1
done
exit $status
