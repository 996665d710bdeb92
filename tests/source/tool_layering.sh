#!/usr/bin/env bash
# The files of a tool (tools/NAME/) call each other one way, as the
# library's folders do (tests/source/layering.sh, docs/DESIGN.md):
#  - the tool's header declares its layers, top to bottom, on one line of
#    its opening comment: " * layers: main > command > ... > base";
#  - each .c file names its layer on a line of its opening comment:
#    " * Layer: report. ...";
#  - a file may call the files of its own layer and of the layers below,
#    never one above ("wrong-way call"), and no files may call each other
#    round in a cycle, even within a layer ("call cycle");
#  - no function is longer than MAX_LINES lines (signature to closing
#    brace) unless the comment right above it gives the reason, starting
#    "Long: " (a table or a text kept whole).
# Calls are read from the object files: every symbol a file leaves
# undefined (nm) is mapped to the file that defines it, so a call through
# a bare prototype counts as much as one through the header.
# Usage: tool_layering.sh TOOL_DIR [OBJECT_FILE...]
#   OBJECT_FILEs as CMake lays them out, .../NAME.dir/tools/TOOL/FILE.c.o
#   (ctest passes $<TARGET_OBJECTS:tapegrad-TOOL>); without them only the
#   layers named and the lengths are checked.
set -euo pipefail
dir=${1:?usage: tool_layering.sh TOOL_DIR [OBJECT_FILE...]}
shift
MAX_LINES=80
bad=0

# ---- the layers, top to bottom --------------------------------------------------
order=$(sed -n 's/^ \* layers: *//p' "$dir"/*.h | head -n 1)
[ -n "$order" ] || { echo "tool_layering: no ' * layers: A > B > ...' line in $dir/*.h"; exit 1; }
declare -A RANK=()  # 0: the top
n=0
for name in ${order//>/ }; do RANK[$name]=$n; n=$((n + 1)); done

# ---- each file's layer ----------------------------------------------------------
declare -A LAYER=()
for file in "$dir"/*.c; do
  base=${file##*/}
  layer=$(sed -n '1,/\*\//s/^ \* Layer: *\([a-z]*\).*/\1/p' "$file" | head -n 1)
  if [ -z "$layer" ]; then
    echo "no layer: $file (its opening comment wants a line ' * Layer: NAME.', NAME one of: $order)"
    bad=1
  elif [ -z "${RANK[$layer]+set}" ]; then
    echo "unknown layer: $file says '$layer' (the layers: $order)"
    bad=1
  else
    LAYER[$base]=$layer
  fi
done

# ---- function lengths -----------------------------------------------------------
# A definition starts at column 0 with a name and "(" before any "=", and its
# body closes with "}" alone at column 0 (clang-format's layout).
long=$(awk -v max=$MAX_LINES '
  FNR == 1 { state = 0; cstart = 0; cend = -1; ctext = "" }
  /^\/\*/ { cstart = FNR; ctext = "" }
  cstart && FNR >= cstart { ctext = ctext $0 "\n"; if ($0 ~ /\*\//) { cend = FNR; cstart = 0 } }
  state == 0 && /^[A-Za-z_][^=(]*\(/ && !/^typedef/ {
    state = 1; start = FNR; sig = $0; why = (cend == FNR - 1) ? ctext : ""
  }
  state == 1 && /;[[:space:]]*$/ && !/\{[[:space:]]*$/ { state = 0; next }
  state == 1 && /\{[[:space:]]*$/ { state = 2; next }
  state == 2 && /^\}/ {
    state = 0
    if (FNR - start + 1 > max && why !~ /Long: /) {
      name = sig; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
      printf "%s:%d: %s is %d lines (over %d; split it into named steps, or say why in a \"Long: \" comment above it)\n",
             FILENAME, start, name, FNR - start + 1, max
    }
  }' "$dir"/*.c)
if [ -n "$long" ]; then echo "$long"; bad=1; fi

# ---- calls between the files -----------------------------------------------------
if [ $# -gt 0 ]; then
  command -v nm > /dev/null || { echo "tool_layering: nm (binutils) not found" >&2; exit 2; }
  refs=$(for obj in "$@"; do
    [ -f "$obj" ] || { echo "tool_layering: $obj not found (build the tool first)" >&2; exit 2; }
    src=${obj##*/}; src=${src%.o}
    nm -P "$obj" | awk -v src="$src" '
      $2 == "U" { print "U", $1, src; next }
      $2 ~ /^[A-TV-Z]$/ { print "D", $1, src }'
  done)
  # "USER DEFINER SYMBOL" for every use of a symbol another file of the tool defines.
  uses=$(awk '$1 == "D" { def[$2] = $3 }
              $1 == "U" { u[++n] = $0 }
              END { for (i = 1; i <= n; i++) { split(u[i], f, " ")
                      if ((f[2] in def) && def[f[2]] != f[3]) print f[3], def[f[2]], f[2] } }' \
           <<< "$refs" | sort)
  nuse=0
  while read -r user definer sym; do
    [ -n "$user" ] || continue
    nuse=$((nuse + 1))
    lu=${LAYER[$user]:-} ld=${LAYER[$definer]:-}
    [ -n "$lu" ] && [ -n "$ld" ] || continue  # reported above
    if [ "${RANK[$ld]}" -lt "${RANK[$lu]}" ]; then
      echo "wrong-way call: $dir/$user ($lu) uses $sym, defined in $dir/$definer ($ld, a layer above)"
      bad=1
    fi
  done <<< "$uses"
  # the file graph: tsort fails on a cycle and names its files
  edges=$(awk '{ print $1, $2 }' <<< "$uses" | sort -u)
  if [ -n "$edges" ] && ! tsort <<< "$edges" > /dev/null 2> /tmp/tool_layering.$$; then
    echo "call cycle between the files of $dir (each calls the next):"
    grep -v 'input contains a loop' /tmp/tool_layering.$$ | sed 's/^tsort: /  /'
    bad=1
  fi
  rm -f /tmp/tool_layering.$$
  echo "tool_layering: $# object files, $nuse uses of a function of another file of $dir"
fi

if [ $bad = 0 ]; then
  echo "tool_layering: $dir calls one way, no cycle ($order); no function over $MAX_LINES lines without a reason"
fi
exit $bad
