# test_secrets.sh - no message of the dlock command shows a password: bad
# URLs (wherever the parser stops), failed authentication, unreachable
# servers, given by --url or by $DLOCK_URL.
. "$DLOCK_TEST_LIB"
start_redis
rcli CONFIG SET requirepass 'g00dpass' >/dev/null
rcli -a g00dpass --no-auth-warning ACL SETUSER app on '>appp4ss' '~*' '&*' '+@all' >/dev/null
port=$REDIS_PORT
SECRET=s3cretW0rd

# no_secret "what" ARGS...: run dlock, its stderr and stdout must not hold
# the secret; the exit status must say failure.
no_secret() {
  local what=$1 rc
  shift
  "$DLOCK" "$@" >"$TEST_DIR/out" 2>"$TEST_DIR/err" </dev/null
  rc=$?
  if [ "$rc" != 0 ] && ! grep -q "$SECRET" "$TEST_DIR/out" "$TEST_DIR/err" && [ -s "$TEST_DIR/err" ]; then
    pass "$what"
  else
    fail "$what" "exit $rc" "stderr: $(cat "$TEST_DIR/err")"
  fi
}

for url in "redis://u:$SECRET@127.0.0.1:99999" "redis://$SECRET@127.0.0.1:x" \
           "redis://u:pa/$SECRET@127.0.0.1" "redis://u:pa?$SECRET@127.0.0.1" \
           "redis://u:$SECRET@127.0.0.1?bogus=1" "unix:///tmp/none.sock?password=$SECRET&bogus=1" \
           "http://u:$SECRET@127.0.0.1" "redis://u:$SECRET%zz@127.0.0.1"; do
  no_secret "a bad URL does not show its password: $(printf '%s' "$url" | sed "s/$SECRET/SECRET/")" \
    status --url "$url" x
  DLOCK_URL=$url no_secret "the same through \$DLOCK_URL: $(printf '%s' "$url" | sed "s/$SECRET/SECRET/")" \
    status x
done
no_secret "run with a bad URL" run --url "redis://u:$SECRET@127.0.0.1:0" x -- true
no_secret "release --force with a bad URL" release --force --url "redis://$SECRET@127.0.0.1:0" x
no_secret "fence check with a bad URL" fence check --url "redis://$SECRET@[::1" r 5

# The server is there; the credentials are wrong.
no_secret "a wrong password (user:password) is not shown" status --url "redis://app:$SECRET@127.0.0.1:$port" x
no_secret "a wrong lone password is not shown" status --url "redis://$SECRET@127.0.0.1:$port" x
no_secret "a wrong password as a parameter is not shown" list --url "redis://127.0.0.1:$port?password=$SECRET"
assert_match "the failure still says authentication failed and names the user" "$(cat "$TEST_DIR/err")" \
  "authentication.*failed|WRONGPASS"
"$DLOCK" status --url "redis://app:$SECRET@127.0.0.1:$port" x 2>"$TEST_DIR/err"
assert_match "the URL is shown with the password masked" "$(cat "$TEST_DIR/err")" \
  "redis://app:\*\*\*@127.0.0.1:$port"
rcli -a g00dpass --no-auth-warning CONFIG SET requirepass '' >/dev/null
no_secret "AUTH against a server without passwords is not shown" \
  status --url "redis://$SECRET@127.0.0.1:$port" x

# Nobody listens: a connection error names the server, not the password.
dead=$(free_port)
no_secret "an unreachable server does not show the password" status --url "redis://u:$SECRET@127.0.0.1:$dead" x

# A good password works (the masking does not touch what is sent).
rcli CONFIG SET requirepass 'g00dpass' >/dev/null
out=$("$DLOCK" status --url "redis://app:appp4ss@127.0.0.1:$port" x 2>&1)
assert_match "the right password still connects" "$out" "state: +free"

# ---- issue 27 item 2: a password from a file, never in argv nor in the
# command's environment ----
PWF="$TEST_DIR/redis.pw"
printf 'g00dpass\n' >"$PWF"
chmod 600 "$PWF"
URL="redis://127.0.0.1:$port"
"$DLOCK" run --url "$URL" --password-file "$PWF" pwname -- \
  sh -c "env >'$TEST_DIR/child.env'; tr '\0' ' ' </proc/\$PPID/cmdline >'$TEST_DIR/dlock.args'" \
  2>"$TEST_DIR/err"
assert_eq "--password-file: run connects with the file's password" "$?" 0
check "--password-file: the command's environment has no password" \
  sh -c "test -s '$TEST_DIR/child.env' && ! grep -q g00dpass '$TEST_DIR/child.env'"
check "--password-file: dlock's own command line (ps) has no password" \
  sh -c "grep -q pwname '$TEST_DIR/dlock.args' && ! grep -q g00dpass '$TEST_DIR/dlock.args'"
check "--password-file: no warning for a file only its owner reads" sh -c "! grep -q warning '$TEST_DIR/err'"
out=$(DLOCK_PASSWORD_FILE=$PWF "$DLOCK" status --url "$URL" pwname 2>&1)
assert_match "DLOCK_PASSWORD_FILE: status connects" "$out" "state: +free"
mkdir -p "$TEST_DIR/xdg/dlock"
printf 'password_file = %s\n' "$PWF" >"$TEST_DIR/xdg/dlock/config"
out=$("$DLOCK" status --url "$URL" pwname 2>&1)
assert_match "password_file in the config file: status connects" "$out" "state: +free"
out=$("$DLOCK" config show --url "$URL" 2>&1)
assert_match "config show names the password file" "$out" "password_file.*redis.pw"
check "config show does not print the password" sh -c "! printf '%s' '$out' | grep -q g00dpass"
rm -f "$TEST_DIR/xdg/dlock/config"
chmod 644 "$PWF"
"$DLOCK" status --url "$URL" --password-file "$PWF" pwname >/dev/null 2>"$TEST_DIR/err"
assert_eq "a file others may read still works" "$?" 0
assert_match "... with a warning that says how to fix it" "$(cat "$TEST_DIR/err")" \
  "password file .*redis.pw may be read by others \(mode 0644\): chmod 600"
"$DLOCK" status --url "$URL" --password-file "$TEST_DIR/none.pw" pwname >/dev/null 2>"$TEST_DIR/err"
assert_eq "a missing password file is a usage error" "$?" 64
assert_match "... naming the file and where it came from" "$(cat "$TEST_DIR/err")" \
  "password file .*none.pw \(from --password-file\): No such file"
printf '%s\n' "$SECRET" >"$TEST_DIR/wrong.pw"
chmod 600 "$TEST_DIR/wrong.pw"
no_secret "a wrong password from a file is not shown" status --url "$URL" --password-file "$TEST_DIR/wrong.pw" x
: >"$TEST_DIR/empty.pw"
"$DLOCK" status --url "$URL" --password-file "$TEST_DIR/empty.pw" x >/dev/null 2>"$TEST_DIR/err"
assert_eq "an empty password file is a usage error" "$?" 64
assert_match "... saying its first line is empty" "$(cat "$TEST_DIR/err")" "empty.pw .*its first line is empty"
"$DLOCK" status --url "zk://127.0.0.1:1/x" --password-file "$TEST_DIR/wrong.pw" x >/dev/null 2>"$TEST_DIR/err"
assert_eq "a password file with a ZooKeeper URL is a usage error" "$?" 64
assert_match "... saying where ZooKeeper takes credentials" "$(tr '\n' ' ' <"$TEST_DIR/err")" "digest"
check "... without the password" sh -c "! grep -q '$SECRET' '$TEST_DIR/err'"
finish
