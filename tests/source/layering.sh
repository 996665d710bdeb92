#!/usr/bin/env bash
# The library's folders depend on each other one way (docs/DESIGN.md):
#   tensor <- autograd <- layers <- optim <- io <- train,   layers <- check,
#   optim <- dist
# A file may include headers of its own folder and of folders before it,
# never after it; include/tapegrad/NAME.h counts as folder NAME, and the
# umbrella include/tapegrad.h as the top (train). check/ may use layers and
# below, dist/ optim and below, and nothing else in the library may include
# check/ or dist/ (each is a library of its own, above the main one).
# Usage: layering.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: layering.sh SOURCE_DIR}"

rank() {
  case $1 in
    tensor) echo 0 ;; autograd|op) echo 1 ;; layers) echo 2 ;; optim) echo 3 ;;
    io) echo 4 ;; train|umbrella) echo 5 ;; check|dist) echo 9 ;; *) echo -1 ;;
  esac
}
# The folder an include names: "autograd/tape.h" -> autograd,
# "tapegrad/layers.h" -> layers, "tapegrad.h" -> umbrella.
folder_of_include() {
  case $1 in
    tapegrad.h) echo umbrella ;;
    tapegrad/*) local b=${1#tapegrad/}; echo "${b%.h}" ;;
    */*) echo "${1%%/*}" ;;
    *) echo "" ;;
  esac
}

bad=0
while IFS= read -r file; do
  case $file in
    include/tapegrad.h) from=umbrella ;;
    include/tapegrad/*) b=${file#include/tapegrad/}; from=${b%.h} ;;
    *) from=${file%%/*} ;;
  esac
  from_rank=$(rank "$from")
  while IFS= read -r inc; do
    to=$(folder_of_include "$inc")
    [ -n "$to" ] || continue
    to_rank=$(rank "$to")
    [ "$to_rank" -ge 0 ] || continue
    ok=1
    if [ "$from" = check ]; then
      # check/ sits on layers/ (and below); optim, io and train are not its business
      case $to in optim|io|train|umbrella|dist) ok=0 ;; esac
    elif [ "$from" = dist ]; then
      # dist/ sits on optim/ (and below): the training loop's files are not its business
      case $to in io|train|umbrella|check) ok=0 ;; esac
    elif [ "$to" = check ] || [ "$to" = dist ]; then
      ok=0
    elif [ "$to_rank" -gt "$from_rank" ]; then
      ok=0
    fi
    if [ $ok = 0 ]; then
      echo "wrong-way include: $file ($from) includes \"$inc\" ($to)"
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'tensor/*' 'autograd/*' 'layers/*' 'optim/*' 'io/*' 'train/*' 'check/*' 'dist/*' 'include/*' \
           2>/dev/null | grep -E '\.(c|h|inc)$' \
         || find tensor autograd layers optim io train check dist include -name '*.[ch]' -o -name '*.inc')

if [ $bad = 0 ]; then
  echo "layering: every include points down (tensor <- autograd <- layers <- optim <- io <- train; layers <- check;" \
       "optim <- dist)"
fi
exit $bad
