#!/usr/bin/env bash
# The install target, the pkg-config file and the examples work together: install into a
# temp prefix, check that the man page and completions are there, build each example with
# `pkg-config --cflags --libs dlock` (and --static) and with CMake's find_package(dlock CONFIG)
# against the installed header and library (static and shared), and run some against a
# private server.
set -u
build=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
srv_pid=
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null || fail "cmake --install"
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig
flags=$(pkg-config --cflags --libs dlock) || fail "pkg-config does not find dlock"
[ -f "$tmp/prefix/include/dlock.h" ] || fail "dlock.h not installed"
# 'dlock --help' points at dlock(1): the page, and the completions, are installed.
[ -f "$tmp/prefix/share/man/man1/dlock.1" ] || fail "share/man/man1/dlock.1 not installed"
MANPATH=$tmp/prefix/share/man man -w dlock 2>/dev/null | grep -q "^$tmp/prefix/share/man/man1/dlock.1" \
  || fail "man -w dlock does not find the installed page"
[ -f "$tmp/prefix/share/man/man3/libdlock.3" ] || fail "share/man/man3/libdlock.3 not installed"
MANPATH=$tmp/prefix/share/man man -w dlock_mutex_acquire 2>/dev/null |
  grep -q "^$tmp/prefix/share/man/man3/dlock_mutex_acquire.3" ||
  fail "man -w dlock_mutex_acquire does not find the installed per-function page"
[ -f "$tmp/prefix/share/bash-completion/completions/dlock" ] || fail "bash completion not installed"
[ -f "$tmp/prefix/share/zsh/vendor-completions/_dlock" ] || fail "zsh completion not installed"
# A consumer gets our include directory and nothing else: no dependency's
# Cflags leak into its build.
incdir=$(pkg-config --variable=includedir dlock)
cflags=$(pkg-config --cflags dlock)
[ "$(echo $cflags)" = "-I$incdir" ] || fail "pkg-config --cflags dlock gives '$cflags', want '-I$incdir'"
cflags=$(pkg-config --cflags --static dlock)
[ "$(echo $cflags)" = "-I$incdir" ] || fail "pkg-config --cflags --static dlock gives '$cflags'"
pkg-config --libs --static dlock | grep -q -- '-lssl' || fail "pkg-config --static --libs lacks -lssl"
# The library encodes and parses RESP itself: no hiredis for its users.
! pkg-config --libs --static dlock | grep -q -- '-lhiredis' || fail "pkg-config --static --libs still names hiredis"
libdir=$(pkg-config --variable=libdir dlock)
for ex in "$src"/examples/*.c; do
  name=$(basename "$ex" .c)
  cc -std=c11 -Wall -Wextra -Werror "$ex" $flags -Wl,-rpath,"$libdir" \
     -o "$tmp/$name" || fail "example $name does not build against the installed library"
  # --static: the archive, then what Libs.private says it needs.
  cc -std=c11 -Wall -Wextra -Werror "$ex" $(pkg-config --cflags dlock) "$libdir/libdlock.a" \
     $(pkg-config --libs-only-other --libs-only-l --static dlock | sed 's/-ldlock//') -o "$tmp/$name-static" \
     || fail "example $name does not link statically with 'pkg-config --static'"
done

# The same examples with CMake: find_package(dlock CONFIG) in a project of
# their own, against the installed tree only, shared and static targets.
mkdir -p "$tmp/cmake-src"
cat > "$tmp/cmake-src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(dlock_examples C)
find_package(dlock 0.1 CONFIG REQUIRED)
file(GLOB examples $src/examples/*.c)
foreach(example \${examples})
  get_filename_component(name \${example} NAME_WE)
  add_executable(\${name} \${example})
  target_link_libraries(\${name} PRIVATE dlock::dlock)
  add_executable(\${name}-static \${example})
  target_link_libraries(\${name}-static PRIVATE dlock::dlock_static)
endforeach()
get_target_property(type dlock::dlock TYPE)
get_target_property(stype dlock::dlock_static TYPE)
if(NOT type STREQUAL "SHARED_LIBRARY" OR NOT stype STREQUAL "STATIC_LIBRARY")
  message(FATAL_ERROR "dlock::dlock is \${type}, dlock::dlock_static is \${stype}")
endif()
CMAKE
out=$(cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" 2>&1) || fail "find_package(dlock CONFIG) failed: $out"
out=$(cmake --build "$tmp/cmake-build" 2>&1) || fail "the examples do not build with find_package(dlock): $out"
# The version file: a newer major version than installed is not found.
sed -i 's/find_package(dlock 0.1 CONFIG REQUIRED)/find_package(dlock 99 CONFIG REQUIRED)/' "$tmp/cmake-src/CMakeLists.txt"
out=$(cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build-99" -DCMAKE_PREFIX_PATH="$tmp/prefix" 2>&1) \
  && fail "find_package(dlock 99) accepted version $(pkg-config --modversion dlock)"
echo "$out" | grep -q "dlockConfig.cmake, version: " || fail "find_package(dlock 99) failed, but not on the version: $out"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >/dev/null &
srv_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/mutex_basic") || fail "mutex_basic failed: $out"
echo "$out" | grep -q "acquired with fence" || fail "mutex_basic printed: $out"
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/with_lock-static") || fail "with_lock failed: $out"
echo "$out" | grep -q "closing unpaid orders" || fail "with_lock printed: $out"
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/cmake-build/mutex_basic") || fail "mutex_basic (CMake) failed: $out"
echo "$out" | grep -q "acquired with fence" || fail "mutex_basic (CMake) printed: $out"
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/cmake-build/with_lock-static") || fail "with_lock-static (CMake) failed: $out"
echo "$out" | grep -q "closing unpaid orders" || fail "with_lock-static (CMake) printed: $out"
echo "1 passed, 0 failed"
