# Sourced (bash) by the tests that build a user's program against a fresh
# install of the build: tests/examples/check.sh and tests/dist/check.sh.
# install_prefix BUILD PREFIX installs BUILD into PREFIX, points pkg-config
# and the loader at it, and sets the array `extra` to the flags a user's
# program needs with a sanitized library (the same runtime). Reads
# TG_CMAKE, TG_LIBDIR and TG_SANITIZE (set by ctest; defaults cmake, lib,
# none) and defaults TG_CC to cc.
install_prefix() {
  : "${TG_CMAKE:=cmake}" "${TG_CC:=cc}" "${TG_LIBDIR:=lib}" "${TG_SANITIZE:=}"
  extra=()
  [ -z "$TG_SANITIZE" ] || extra=("-fsanitize=$TG_SANITIZE" -fno-omit-frame-pointer)
  "$TG_CMAKE" --install "$1" --prefix "$2" > "$2.install.log"
  export PKG_CONFIG_PATH="$2/$TG_LIBDIR/pkgconfig"
  export LD_LIBRARY_PATH="$2/$TG_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
