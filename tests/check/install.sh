#!/usr/bin/env bash
# The install target, the pkg-config file and the examples work together: install into a
# temp prefix, check that the man page and completions are there, build each example with `pkg-config --cflags --libs dlock` against the
# installed header and library (static and shared), and run one against a private server.
set -u
build=$1
src=$2
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
[ -f "$tmp/prefix/share/bash-completion/completions/dlock" ] || fail "bash completion not installed"
[ -f "$tmp/prefix/share/zsh/vendor-completions/_dlock" ] || fail "zsh completion not installed"
for ex in "$src"/examples/*.c; do
  name=$(basename "$ex" .c)
  cc -std=c11 -Wall -Wextra -Werror "$ex" $flags -Wl,-rpath,"$(pkg-config --variable=libdir dlock)" \
     -o "$tmp/$name" || fail "example $name does not build against the installed library"
  cc -std=c11 -Wall -Wextra -Werror "$ex" $(pkg-config --cflags dlock) "$(pkg-config --variable=libdir dlock)/libdlock.a" \
     $(pkg-config --libs-only-l --static hiredis openssl) -lpthread -o "$tmp/$name-static" \
     || fail "example $name does not link statically"
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >/dev/null &
srv_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/mutex_basic") || fail "mutex_basic failed: $out"
echo "$out" | grep -q "acquired with fence" || fail "mutex_basic printed: $out"
out=$(DLOCK_URL=redis://127.0.0.1:$port "$tmp/with_lock-static") || fail "with_lock failed: $out"
echo "$out" | grep -q "closing unpaid orders" || fail "with_lock printed: $out"
echo "1 passed, 0 failed"
