#!/usr/bin/env bash
# The library's folders depend on each other one way (docs/DESIGN.md):
#   tensor <- autograd <- layers <- optim <- io <- train,   layers <- check,
#   optim <- data_parallel
# A file may use its own folder and the folders before it, never one after
# it. check/ may use layers and below, data_parallel/ optim and below, and
# nothing else in the library may use check/ or data_parallel/ (each is a
# library of its own, above the main one). This test sees a dependency two ways:
#  - includes, "..." and <...>: include/tapegrad/NAME.h counts as folder
#    NAME (dist.h as data_parallel, the folder of its library), the
#    umbrella include/tapegrad.h as the top (train);
#  - symbols, when the libraries' object files are given: every symbol an
#    object file leaves undefined is mapped to the folder whose object file
#    defines it, so a call through a bare prototype (no include at all) into
#    a later folder fails too.
# Internal headers stay in their folder, but for the few a folder below
# offers on purpose (CROSSING below): tensor/'s, the base every folder
# builds on; autograd/'s op-writing interface for the fused ops of layers/
# and for check/; the op descriptors of autograd/ and layers/ for check/'s
# registry, which lists every op by its descriptor; and the tape's records
# for data_parallel/, whose all-reduces start from a hook in backward's walk
# (data_parallel/overlap.c). A public header includes only public headers.
# Usage: layering.sh SOURCE_DIR [OBJECT_FILE...]
#   OBJECT_FILEs as CMake lays them out, .../NAME.dir/FOLDER/FILE.c.o
#   (ctest passes the three libraries' $<TARGET_OBJECTS:...>).
set -euo pipefail
cd "${1:?usage: layering.sh SOURCE_DIR [OBJECT_FILE...]}"
shift

# Internal headers a file of another folder may include: "header: folders".
CROSSING="
tensor/*: all
autograd/tape.h: layers check data_parallel
autograd/grad_graph.h: layers check
autograd/lowp.h: layers
autograd/ops_attention.h: layers
autograd/ops.h: check
layers/ops.h: check
"

# The rank of a folder in that order, in RANK (-1: not a library folder).
# (Functions here set variables rather than print: no subshell per call.)
rank() {
  case $1 in
    tensor) RANK=0 ;; autograd | op) RANK=1 ;; layers) RANK=2 ;; optim) RANK=3 ;;
    io) RANK=4 ;; train | umbrella) RANK=5 ;; check | data_parallel) RANK=9 ;; *) RANK=-1 ;;
  esac
}

# Whether a file of folder $1 may use folder $2 (both known to rank).
may_use() {
  local from=$1 to=$2
  [ "$from" != "$to" ] || return 0
  case $from in
    check) case $to in optim | io | train | umbrella | data_parallel) return 1 ;; esac ;;  # check/ sits on layers/
    data_parallel) case $to in io | train | umbrella | check) return 1 ;; esac ;; # data_parallel/ sits on optim/
    *)
      case $to in check | data_parallel) return 1 ;; esac
      local to_rank
      rank "$to"; to_rank=$RANK
      rank "$from"
      [ "$to_rank" -le "$RANK" ] || return 1
      ;;
  esac
  return 0
}

# The folder an include names: "autograd/tape.h" -> autograd,
# "tapegrad/layers.h" -> layers, "tapegrad/dist.h" -> data_parallel,
# "tapegrad.h" -> umbrella, "stdio.h" -> "", in FOLDER.
folder_of_include() {
  case $1 in
    tapegrad.h) FOLDER=umbrella ;;
    tapegrad/dist.h) FOLDER=data_parallel ;;
    tapegrad/*) FOLDER=${1#tapegrad/}; FOLDER=${FOLDER%.h} ;;
    */*) FOLDER=${1%%/*} ;;
    *) FOLDER="" ;;
  esac
}

# Whether a file of folder $1 may include the internal header $2 of another folder.
may_cross() {
  local from=$1 inc=$2 header folders
  while IFS=: read -r header folders; do
    [ -n "$header" ] || continue
    # shellcheck disable=SC2053  # the table's headers are patterns
    [[ $inc == $header ]] || continue
    for f in $folders; do [ "$f" = all ] || [ "$f" = "$from" ] && return 0; done
  done <<< "$CROSSING"
  return 1
}

bad=0
files=$(git ls-files 'tensor/*' 'autograd/*' 'layers/*' 'optim/*' 'io/*' 'train/*' 'check/*' 'data_parallel/*' 'include/*' \
          2> /dev/null | grep -E '\.(c|h|inc)$' ||
        find tensor autograd layers optim io train check data_parallel include -name '*.[ch]' -o -name '*.inc')
while IFS= read -r file; do
  case $file in
    include/tapegrad.h) from=umbrella ;;
    include/tapegrad/dist.h) from=data_parallel ;;
    include/tapegrad/*) b=${file#include/tapegrad/}; from=${b%.h} ;;
    *) from=${file%%/*} ;;
  esac
  while IFS= read -r inc; do
    folder_of_include "$inc"
    to=$FOLDER
    rank "$to"
    [ -n "$to" ] && [ $RANK -ge 0 ] || continue
    if ! may_use "$from" "$to"; then
      echo "wrong-way include: $file ($from) includes \"$inc\" ($to)"
      bad=1
    elif [ "${inc%%/*}" != tapegrad ] && [ "$inc" != tapegrad.h ] && [ "$to" != "$from" ]; then
      case $file in
        include/*) echo "public header includes an internal one: $file includes \"$inc\""; bad=1 ;;
        *) if ! may_cross "$from" "$inc"; then
             echo "internal header across folders: $file ($from) includes \"$inc\" (internal to $to/;" \
                  "see CROSSING in tests/source/layering.sh)"
             bad=1
           fi ;;
      esac
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]\([^">]*\)[">].*/\1/p' "$file")
done <<< "$files"

# ---- symbols ----------------------------------------------------------------------------
if [ $# -gt 0 ]; then
  command -v nm > /dev/null || { echo "layering: nm (binutils) not found" >&2; exit 2; }
  # "D|U SYMBOL FOLDER FILE" for every global symbol an object file defines or uses.
  refs=$(for obj in "$@"; do
    case $obj in
      */*.dir/*/*.o) src=${obj#*.dir/}; src=${src%.o} ;;
      *) echo "layering: $obj is not laid out as .../NAME.dir/FOLDER/FILE.c.o" >&2; exit 2 ;;
    esac
    [ -f "$obj" ] || { echo "layering: $obj not found (build the libraries first)" >&2; exit 2; }
    nm -P "$obj" | awk -v src="$src" '
      BEGIN { folder = src; sub(/\/.*/, "", folder) }
      $2 == "U" { print "U", $1, folder, src; next }
      $2 ~ /^[A-TV-Z]$/ { print "D", $1, folder, src }'
  done)
  # "FROM TO FILE SYMBOL DEFINER" for every use of a symbol another folder defines.
  uses=$(awk '$1 == "D" { folder[$2] = $3; file[$2] = $4 }
              $1 == "U" { u[++n] = $0 }
              END { for (i = 1; i <= n; i++) { split(u[i], f, " ")
                      if ((f[2] in folder) && folder[f[2]] != f[3]) print f[3], folder[f[2]], f[4], f[2], file[f[2]] } }' \
           <<< "$refs" | sort -u)
  nsym=0
  while read -r from to file sym definer; do
    [ -n "$from" ] || continue
    nsym=$((nsym + 1))
    if ! may_use "$from" "$to"; then
      echo "wrong-way call: $file ($from) uses $sym, defined in $definer ($to)"
      bad=1
    fi
  done <<< "$uses"
  echo "layering: $# object files, $nsym uses of a symbol of another folder"
fi

if [ $bad = 0 ]; then
  echo "layering: every include${1:+ and every call} points down (tensor <- autograd <- layers <- optim <- io <- train;" \
       "layers <- check; optim <- data_parallel)"
fi
exit $bad
