#!/usr/bin/env bash
# ctest `install_plugin`: installs the build into a temporary prefix, builds
# tests/install/plugin/ (a learner's LayerNorm as a custom op, correct and
# with a bug) against it as a shared object, and checks it with the
# installed tapegrad-gradcheck --plugin: the correct op passes (exit 0),
# the buggy one is wrong (exit 1) with the diagnosis that names its bug;
# the plugin's tangent rules reach the tool (--modes fwd, --adjoint), an op
# without a double-backward rule at --order 2 gets the documented message
# (exit 3); a plugin that does not load or lacks the registration symbol
# is refused with the reason (exit 2).
# Usage: plugin.sh BUILD_DIR WORK_DIR CMAKE CC [SANITIZE]
set -euo pipefail
build=$1 work=$2 cmake=$3 cc=$4 sanitize=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
# shellcheck source=tests/install/prefix.sh
. "$here/prefix.sh"
TG_CMAKE=$cmake TG_CC=$cc TG_SANITIZE=$sanitize install_prefix "$build" "$prefix"
"$cmake" -S "$here/plugin" -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${extra[*]}" -DCMAKE_BUILD_TYPE=Debug > "$work/configure.log"
"$cmake" --build "$work/b" > "$work/build.log"
tool=$prefix/bin/tapegrad-gradcheck
so=$work/b/libmyop.so

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect STATUS LOG ARGS...: runs the tool, checks its exit status
expect() {
  local want=$1 log=$2 rc=0; shift 2
  NO_COLOR=1 "$tool" "$@" > "$log" 2>&1 || rc=$?
  if grep -q "Sanitizer" "$log"; then cat "$log" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$rc" -eq "$want" ] || { cat "$log" >&2; fail "$*: exit status $rc, want $want"; }
}
has() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "'$2' not in the output"; }; }

expect 0 "$work/list.log" --plugin "$so" list
has "$work/list.log" "my_layernorm"
has "$work/list.log" "a learner's LayerNorm"
expect 0 "$work/check.log" check my_layernorm --plugin "$so"
has "$work/check.log" "my_layernorm"
expect 1 "$work/bug.log" --plugin "$so" check my_layernorm_nomean --shape 2x4
has "$work/bug.log" "WRONG"
has "$work/bug.log" "diagnosis of x 2x4 (2x4): mean-term"
has "$work/bug.log" "a dropped mean term"
# its tangent rules reach the tool: forward mode and the adjoint test run
# on the plugin's ops (the bug's forward is right: fwd passes, the adjoint
# test finds its backward wrong)
expect 0 "$work/fwd.log" --plugin "$so" check my_layernorm --modes fwd,rev --adjoint
has "$work/fwd.log" "all pass"
expect 1 "$work/fwdbug.log" --plugin "$so" check my_layernorm_nomean --shape 2x4 --modes fwd --adjoint
has "$work/fwdbug.log" "WRONG"
# no double-backward rule: the documented message, an inconclusive check
expect 3 "$work/order2.log" --plugin "$so" check my_layernorm --order 2 --shape 2x4
has "$work/order2.log" "'my_layernorm' cannot be differentiated twice"
if grep -q "returned false without setting an error" "$work/order2.log"; then
  cat "$work/order2.log" >&2; fail "--order 2: the undocumented message"
fi
expect 2 "$work/missing.log" --plugin "$work/no-such-plugin.so" list
has "$work/missing.log" "cannot be loaded"
expect 2 "$work/nosym.log" --plugin "$work/b/libnosym.so" list
has "$work/nosym.log" "has no symbol tg_gradcheck_plugin_register"
expect 2 "$work/noarg.log" list --plugin
echo "install_plugin: the plugin built against the installed package is checked by the installed tool"
