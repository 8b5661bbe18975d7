# test_completion.sh - the bash completion installed with dlock (generated
# by 'dlock help --completion bash' from the help table): sourced in this
# bash, driven as readline drives it (COMP_WORDS, COMP_CWORD), its answers
# in COMPREPLY checked: commands, options of a command, option values, URL
# schemes (also split at ':' as COMP_WORDBREAKS does), the command after --.
# The zsh script is checked for syntax and, with a stand-in compadd, for
# the same answers.
. "$DLOCK_TEST_LIB"

script=$TEST_DIR/dlock.bash
"$DLOCK" help --completion bash > "$script" || fail "help --completion bash" "exit $?"
# The build generates the installed file the same way; it must be current.
check "the build's completion is current" cmp -s "$script" "$(dirname "$DLOCK")/dlock.bash"
check "the script is valid bash" bash -n "$script"
# shellcheck disable=SC1090
. "$script"
assert_match "sourcing registers _dlock for dlock" "$(complete -p dlock 2>&1)" "-F _dlock dlock$"

# reply WORDS...: complete the last word (may be ""), print COMPREPLY sorted.
reply() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="$*"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _dlock
  printf '%s\n' "${COMPREPLY[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//'
}

assert_eq "first word: every command" "$(reply dlock '')" \
  "bench config cron demo doctor elect every fence help hold init job latch leader list prune release run serve status top version"
assert_eq "first word: commands by prefix" "$(reply dlock re)" "release"
assert_eq "global options" "$(reply dlock --)" "--help --version"
out=$(reply dlock run --)
for o in --url --wait --lease --on-lost --grace --shell --conflict-exit-code --quiet --verbose --help \
         --nonblock --command --multi; do
  assert_match "run: offers $o" " $out " " $o "
done
assert_eq "run: short options" "$(reply dlock run -w 5s -q)" "-q"
assert_eq "run: no option of another command" "$(reply dlock run --js)" ""
# The options of the command's tables (cli/help.c's descriptor), the common ones among them.
assert_eq "status: its options" "$(reply dlock status --)" "--help --json --password-file --prefix --quiet --url --watch"
assert_eq "list: its options, -l and --watch too (no -q: status's only)" "$(reply dlock list --)" "--help --json --long --password-file --prefix --url --watch"
assert_eq "run --url: the schemes" "$(reply dlock run --url '')" "mariadb:// mysql:// postgres:// postgresql:// redis-cluster:// redis-sentinel:// redis:// rediss-cluster:// rediss:// redlock:// unix:// zk://"
assert_eq "run --url: a scheme by prefix" "$(reply dlock run --url redis)" "redis-cluster:// redis-sentinel:// redis:// rediss-cluster:// rediss://"
assert_eq "status --url=: the schemes" "$(reply dlock status --url = u)" "unix://"
assert_eq "--url after a ':' split: only what follows the colon" \
  "$(reply dlock list --url rediss : '')" "//"
assert_eq "a value is not taken for an option" "$(reply dlock run --wait '')" ""
assert_eq "run --on-lost: its actions" "$(reply dlock run --on-lost '')" "ignore kill term"
assert_eq "fence: its action" "$(reply dlock fence '')" "check"
assert_eq "fence check: nothing for RESOURCE" "$(reply dlock fence check '')" ""
assert_eq "config: its action" "$(reply dlock config '')" "show"
# Issue 27 item 11: every verb of a command with several usage lines.
assert_eq "latch: every verb" "$(reply dlock latch '')" "count down set wait"
assert_eq "latch: a verb by prefix" "$(reply dlock latch d)" "down"
assert_match "config show: its options" " $(reply dlock config show --) " " --json .*--prefix .*--url "
assert_eq "help: the commands" "$(reply dlock help ev)" "every"
assert_eq "help --completion: the shells" "$(reply dlock help --completion '')" "bash zsh"
assert_eq "bench --layout: its values" "$(reply dlock bench --layout '')" "cross none same"
assert_match "after --: the command to run" "$(reply dlock run name -- bas)" "(^| )bash( |$)"
assert_eq "after -- and the command: files" "$(cd "$TEST_DIR" && reply dlock run name -- sh dlock.ba)" "dlock.bash"
assert_eq "cron: options after the expression" "$(reply dlock cron '0 * * * * ?' --tim)" ""
assert_match "cron: --lock-at-most-for" "$(reply dlock cron '0 * * * * ?' --lock-at-m)" "^--lock-at-most-for$"

# ---- zsh: the same script shape, checked with stand-ins for its builtins ----
if command -v zsh >/dev/null; then
  zscript=$TEST_DIR/_dlock
  "$DLOCK" help --completion zsh > "$zscript" || fail "help --completion zsh" "exit $?"
  check "the build's zsh completion is current" cmp -s "$zscript" "$(dirname "$DLOCK")/_dlock"
  check "the zsh script is valid zsh" zsh -n "$zscript"
  # zreply WORDS...: source the script as compinit's autoload runs it (it
  # defines _dlock and calls it), with compadd printing what it would offer.
  zreply() {
    zsh -f -c '
      compadd() { while [[ $1 == -* && $1 != -- ]]; do [[ $1 == -S ]] && shift; shift; done
                  [[ $1 == -- ]] && shift; print -l -- "$@"; }
      compset() { :; }; _files() { :; }; _message() { :; }; _normal() { print -- NORMAL; }
      f=$1; shift
      words=("$@"); CURRENT=$#
      source "$f"  # as autoload runs it: defines _dlock and calls it' zsh "$zscript" "$@" 2>&1 | sort -u | tr '\n' ' ' | sed 's/ $//'
  }
  assert_eq "zsh: commands" "$(zreply dlock '')" \
    "bench config cron demo doctor elect every fence help hold init job latch leader list prune release run serve status top version"
  assert_match "zsh: run options" " $(zreply dlock run --) " " --on-lost "
  assert_eq "zsh: --url schemes" "$(zreply dlock run --url '')" "mariadb:// mysql:// postgres:// postgresql:// redis-cluster:// redis-sentinel:// redis:// rediss-cluster:// rediss:// redlock:// unix:// zk://"
  assert_eq "zsh: after --" "$(zreply dlock run x -- '')" "NORMAL"
else
  echo "SKIP zsh checks: zsh is not installed (tools/setup.sh installs it)"
fi

finish
