/*
 * help.c - every help text of the dlock command, in one table. "dlock
 * --help", "dlock CMD --help" and the manual page (dlock help --markdown,
 * saved as docs/dlock.1.md) are all printed from it, and a test compares
 * the saved page with the output, so the help and the manual cannot drift.
 * The roff page and the shell completions are generated from the same
 * table (help_gen.c) at build time.
 */
#include <stdarg.h>
#include <string.h>

#include "cli.h"

/* The command table: one descriptor per command (its name, its handler,
 * its --help page and the manual's more), read by main (dispatch), the
 * help, the man page and the completion (help_gen.c). The first entry is
 * the overview ("dlock --help"). */
static const cli_command pages[] = {
    {NULL, NULL,
     "Usage: dlock COMMAND [OPTIONS] [ARGS]\n"
     "Locks, elections and fleet jobs on Redis, ZooKeeper, PostgreSQL or MySQL.\n"
     "Commands:\n",
     "dlock takes named, leased, fenced locks through libdlock, on the server\n"
     "the URL names (Redis in any topology, ZooKeeper, PostgreSQL, MySQL). A\n"
     "lock expires when its lease runs out (on ZooKeeper: with its holder's\n"
     "session), so a crashed holder cannot block everyone forever. Every hold\n"
     "gets a *fence*: a number larger than any given out before for that name.\n"
     "A resource that remembers the highest fence it has seen can refuse the\n"
     "writes of a holder that lost the lock without knowing it (a process\n"
     "frozen past its lease: a \"zombie\"). `dlock fence check` is that guard.\n"},

    {"run", cmd_run,
     "Usage: dlock run [OPTIONS] NAME [--] COMMAND [ARGS...] | NAME -c 'COMMAND'\n"
     "Take the lock NAME, run COMMAND while it is held (the lease is renewed in\n"
     "the background), release it when COMMAND ends; exit with COMMAND's status.\n"
     "\n"
     "  --url URL, --prefix P  Redis, key prefix (default: see 'dlock config')\n"
     "  -w, --wait DURATION    give up after DURATION (default: wait forever)\n"
     "  -n, --nonblock         try once and give up at once (--wait 0)\n"
     "  -l, --lease DURATION   lease, renewed every third of it (default 30s)\n"
     "  --on-lost ACTION       if the lock is lost: term (SIGTERM to COMMAND's\n"
     "                         group, SIGKILL after --grace), kill, ignore\n"
     "  --grace DURATION       SIGTERM so long before the lease ends; SIGKILL at it\n"
     "  --shell, -c/--command STRING  run COMMAND (one string) / STRING with sh -c\n"
     "  --multi NAME,NAME,...  hold all these names or none, in place of NAME\n"
     "  -E/--conflict-exit-code N, --lost-exit-code N  exit: busy (75); lost (79)\n"
     "  --log-format json      stderr's lines as JSON objects (docs/metrics.md)\n"
     "  -q/--quiet, -v/--verbose  errors only; report the wait (every 10s), fence\n"
     "  -s/--shared, -x/--exclusive  the read / write side of the rwlock NAME\n"
     "  --limit N              take one of N permits of the semaphore NAME\n"
     "\n"
     "DURATION: 250ms, 10s, 1.5s, 1m30s, 2d; a bare number counts seconds.\n"
     "COMMAND gets DLOCK_NAME, DLOCK_FENCE, DLOCK_URL (password as ***), DLOCK_PERMIT\n"
     "and DLOCK_KIND (mutex, read, write, semaphore, multi) in its own process\n"
     "group; SIGINT, SIGTERM, SIGHUP reach it. Exit: its status (128+N: signal N),\n"
     "75 busy, 79 lost, 64 usage, 69 unreachable, 70 internal, 126/127 no COMMAND.\n",
     "Busy: dlock names the holder, as far as Redis knows it (host, pid, user\n"
     "and command of a `dlock run`, since when, lease left, waiters). A name\n"
     "that is another key (a string without expiry and without dlock's\n"
     "metadata: an application's key) is refused at once, exit 64, instead of\n"
     "waiting forever; so is a name whose keys hold another type. Use another\n"
     "name or `--prefix`.\n"
     "\n"
     "The lock is taken in watchdog mode: its lease is `--lease` long and the\n"
     "library renews it every third of that for as long as COMMAND runs. If a\n"
     "renewal finds the key gone or taken by another owner, or cannot reach\n"
     "Redis before the lease ends, the lock is *lost*: dlock prints the reason,\n"
     "acts as `--on-lost` says and, once COMMAND has ended, exits 79 (also with\n"
     "`--on-lost ignore`, and also when the release at the end finds that the\n"
     "key is no longer ours), or `--lost-exit-code N`. Another owner's key is\n"
     "never deleted. The reason says \"another client deleted the key\" after a\n"
     "`dlock release --force`, and \"the key is gone: its lease expired, or it\n"
     "was deleted without dlock\" when Redis cannot tell more.\n"
     "\n"
     "Signals: SIGINT, SIGTERM and SIGHUP sent to dlock are passed on to\n"
     "COMMAND's process group and dlock goes on waiting for COMMAND. Sent while\n"
     "dlock still waits for the lock, they stop the wait and dlock exits 128+N\n"
     "without running COMMAND. A signal that was ignored when dlock started\n"
     "(nohup) stays ignored.\n"
     "\n"
     "No orphans: dlock makes itself the subreaper of COMMAND's processes. When\n"
     "COMMAND ends while other members of its process group still run, dlock\n"
     "sends them SIGTERM, then SIGKILL after `--grace`, and releases the lock\n"
     "only when the group is gone. Processes that leave the group (setsid) are\n"
     "not followed. If dlock itself is killed (SIGKILL), COMMAND gets SIGTERM\n"
     "(PR_SET_PDEATHSIG): nothing renews the lease any more.\n"
     "\n"
     "Terminal: when dlock runs in the foreground of a terminal, COMMAND gets\n"
     "the foreground, so that it can read the terminal and Ctrl-C reaches it\n"
     "directly. When COMMAND is stopped (Ctrl-Z) dlock stops too and resumes it\n"
     "with `fg`. While dlock is stopped the lease is not renewed.\n"
     "\n"
     "COMMAND is looked up in PATH before the lock is taken: a missing command\n"
     "exits 127 and one that is not executable 126, without waiting for the\n"
     "lock. `--shell` passes the single COMMAND string to `/bin/sh -c`.\n"
     "\n"
     "flock(1) habits: `-n` is `--wait 0`, `-w 10` waits 10 seconds, `-E N`\n"
     "sets the exit status when busy, `dlock run NAME -c 'CMD'` runs CMD with\n"
     "`/bin/sh -c`, and `--` may be left out when COMMAND does not start with\n"
     "`-` (`dlock run NAME make all`); options go before COMMAND. COMMAND gets\n"
     "`DLOCK_KIND=mutex`.\n"
     "\n"
     "`--multi a,b,c` (repeatable) takes every name or none, as\n"
     "`dlock_multi_acquire()`: in sorted order, so that runs naming the same\n"
     "locks in other orders never deadlock; a busy name gives back those taken\n"
     "before it and names itself. Losing any name counts as losing the lock.\n"
     "COMMAND gets `DLOCK_KIND=multi`, `DLOCK_NAME=a,b,c` and, in place of\n"
     "`DLOCK_FENCE`, `DLOCK_FENCES=a=F1,b=F2,c=F3` (one fence per name; fences\n"
     "of different names are not comparable). See docs/multilock.md.\n"
     "\n"
     "What `dlock status` shows of the holder is stored with the lock as\n"
     "`dlock-run host=H pid=P user=U cmd=COMMAND...`.\n"
     "\n"
     "Shared and exclusive (as flock -s/-x): `-s` runs COMMAND while holding\n"
     "the read side of NAME, a read-write lock, alongside any number of other\n"
     "`-s` runs; `-x` holds its write side alone. A waiting `-x` blocks `-s`\n"
     "runs that come after it, so writers are not starved; each hold has its\n"
     "own lease. Without `-s` or `-x`, NAME is a plain mutex, as before, and\n"
     "a name is one kind: `dlock run NAME` on a name held with `-s`/`-x` (or\n"
     "the other way round) is refused, exit 64. See docs/rwlock.md.\n"
     "\n"
     "Semaphore: with `--limit N`, NAME is a semaphore of N permits and dlock\n"
     "takes one (docs/semaphore.md): up to N commands run at once under NAME,\n"
     "each permit under its own lease, renewed, lost and released as the lock\n"
     "above; a waiter gets the first permit given back (arrival order).\n"
     "`DLOCK_PERMIT` (and `DLOCK_FENCE`) is the permit's fence, rising per\n"
     "acquisition; without `--limit` DLOCK_PERMIT is empty and DLOCK_KIND is\n"
     "`mutex`. Every caller of NAME must give the same N: the limit is stored\n"
     "with the permits, and another one is refused (exit 64) naming both. A\n"
     "name is one kind of lock at a time: `--limit` on a mutex's name, or no\n"
     "`--limit` on a semaphore's, exits 64. Not offered on Redlock.\n",
     .summary = "run NAME -- CMD [ARGS]\trun a command while holding the lock NAME", .common = CLI_COMMON_SERVER,
     .opts = cli_run_opts},

    {"hold", cmd_run,
     "Usage: dlock hold [OPTIONS] NAME\n"
     "Take the lock NAME and hold it until standard input ends (closed, or\n"
     "Ctrl-D) or a signal comes, for a shell that runs several commands under\n"
     "one lock, as 'exec 9>f; flock 9' does. Prints 'acquired NAME fence F' on\n"
     "stdout once held, and 'lost NAME: REASON' if the lock is lost.\n"
     "\n"
     "  --url URL, --prefix P  the server, key prefix (see 'dlock config')\n"
     "  -w, --wait DURATION    give up after DURATION (default: wait forever)\n"
     "  -n, --nonblock         try once and give up at once (--wait 0)\n"
     "  -l, --lease DURATION   lease, renewed every third of it (default 30s)\n"
     "  -s, -x, --limit N, --multi NAMES  the other kinds, as for run\n"
     "  -E N, --lost-exit-code N, -q, -v, --log-format json  as for run\n"
     "\n"
     "Example (bash):\n"
     "  coproc LOCK { dlock hold deploy; }\n"
     "  read -r line <&\"${LOCK[0]}\"         # acquired deploy fence 42\n"
     "  step1; step2\n"
     "  exec {LOCK[1]}>&-; wait \"$LOCK_PID\" # release; 0, or 79 if lost\n"
     "\n"
     "Exit: 0 released, 75 busy, 79 lost, 128+N signal N, 64, 69, 70.\n",
     "Input is read and thrown away; the lock is released when it ends. So\n"
     "`dlock hold NAME </dev/null` releases at once, and a coprocess holds\n"
     "for as long as the shell keeps its input open (bash closes it at exit,\n"
     "so a script that dies releases the lock). The loss line comes when the\n"
     "library reports the loss, at the local deadline at the latest; a shell\n"
     "that must stop at once on a loss should read the coprocess's output\n"
     "between steps (`read -t 0`), or use `dlock run`, which stops its\n"
     "command itself. Nothing renews the lease while dlock is stopped.\n",
     .summary = NULL, .common = CLI_COMMON_SERVER, .opts = cli_hold_opts},

    {"status", cmd_status,
     "Usage: dlock status [OPTIONS] NAME\n"
     "Show whether the lock NAME is held, the lease left, the current fence and,\n"
     "when dlock run holds it, who: host, pid, user, command and since when.\n"
     "A semaphore shows every permit's holder, fence and lease left.\n"
     "\n"
     "  --url URL     Redis to use (default $DLOCK_URL, then local)\n"
     "  --prefix P    key prefix of lock names (see 'dlock config')\n"
     "  --json        print one JSON object instead\n"
     "  -q, --quiet   print nothing; exit 0 if held, 1 if free (for scripts)\n"
     "  --watch       print one line per change until SIGINT or SIGTERM\n"
     "  -h, --help    this help\n"
     "\n"
     "Exit status: 0 whether held or not (see the output; -q: held), 1 (-q)\n"
     "free, 64 usage error, 69 server unreachable or not ready, 70 internal.\n"
     "--watch ends with 0 on SIGINT, SIGTERM or SIGHUP.\n",
     "JSON fields: `name`, `held` (bool), `foreign` (bool: a key dlock did not\n"
     "write), `ttl_ms`, `fence`, `since_unix_ms` (0 if unknown), `waiters`,\n"
     "`owner_info` (string) and, when the holder is `dlock run`, `holder` with\n"
     "`host`, `pid`, `user` and `command`. A semaphore adds `kind`\n"
     "(\"semaphore\"), `permits` (its limit) and `permits_used`; its `fence`,\n"
     "`owner_info` and `holder` are the newest holder's and `ttl_ms` runs until\n"
     "its last permit ends; `holders` lists every permit (`fence`, `ttl_ms`,\n"
     "`since_unix_ms`, `holder` in words, `owner_info`).\n"
     "\n"
     "`--watch` prints the state, then one line per change, from the server's\n"
     "notifications (not by polling): `acquired`, `released`, `expired` (a\n"
     "lease that ran out), `force-released`, `waiter` (one more waiting),\n"
     "`waiter-left`; each line has the time, the name, the event and, for a\n"
     "hold, its fence and holder. With `--json` each line is one object:\n"
     "`time_unix_ms`, `name`, `event`, `fence`, `ttl_ms`, `holder`,\n"
     "`owner_info`, `waiters`. Changes close together may show as one\n"
     "reading's difference. A lost connection is said on stderr, and so is\n"
     "the reconnect. Where the server cannot notify (MySQL, or PostgreSQL\n"
     "through a transaction-mode pooler) the lock is read again every 2 s;\n"
     "docs/cli.md, \"Watching\", says each server's bound.\n",
     .summary = "status NAME\tis NAME held, by whom, lease left, fence", .common = CLI_COMMON_SERVER,
     .opts = cli_status_opts},

    {"list", cmd_list,
     "Usage: dlock list [OPTIONS] [PATTERN]\n"
     "List the locks currently held whose names match the glob PATTERN (all by\n"
     "default), one name per line.\n"
     "\n"
     "  --url URL     Redis to use (default $DLOCK_URL, then local)\n"
     "  --prefix P    key prefix of lock names (see 'dlock config')\n"
     "  --json        print a JSON array of objects, as 'dlock status --json'\n"
     "  -l, --long    one aligned line per name: state, fence, lease left, holder\n"
     "  --watch       print one line per change until SIGINT or SIGTERM\n"
     "  -h, --help    this help\n"
     "\n"
     "Exit status: 0 (also when none is held), 64 usage error, 69 Redis\n"
     "unreachable or authentication failed, 70 internal error.\n",
     "The list is taken with SCAN, so it is a snapshot that may miss a lock\n"
     "taken or include one released while it runs. With `--json` a lock\n"
     "released between the listing and the look-up of its details is left out.\n"
     "`--watch` prints the held locks, then the lines of `dlock status --watch`\n"
     "for every name that matches, new names included (on Redis a name not\n"
     "seen before is found by listing again every 2 s).\n",
     .summary = "list [PATTERN], top\tthe locks held now; top: a live view of them", .common = CLI_COMMON_SERVER,
     .opts = cli_list_opts},

    {"top", cmd_top,
     "Usage: dlock top [OPTIONS] [PATTERN]\n"
     "A live view of the locks, semaphores, read-write locks, latches and jobs\n"
     "whose names match the glob PATTERN (all by default), one row per name:\n"
     "kind, age of the hold, lease left, fence, waiters, holder. It is woken by\n"
     "the server's notifications (as --watch) and reads again every 2 s at most.\n"
     "\n"
     "  --url URL, --prefix P  server, key prefix (default: see 'dlock config')\n"
     "  --sort KEY             name (default), age, lease, fence, waiters, kind\n"
     "  --once                 print one snapshot and exit (also when stdout is\n"
     "                         not a terminal)\n"
     "  -h, --help             this help\n"
     "\n"
     "Keys: q quit, s next sort key (S the one before), r reverse, / filter the\n"
     "names (Enter keeps it, Esc clears it). Ctrl-C, SIGTERM, SIGHUP quit too.\n"
     "\n"
     "Exit status: 0, 64 usage error, 69 server unreachable at the start or lost\n"
     "for 5 s (the terminal is given back first, with the reason), 70 internal.\n",
     "The header gives the time, the server as the URL names it (a password\n"
     "shown as `***`), the counts per kind and the waiters, the sort key and the\n"
     "age of the last reading. KIND is `lock` (a mutex; an election is one: its holder is the\n"
     "leader's value and its fence the epoch), `rw`, `sem` (its holder column\n"
     "says used/limit and the newest holder), `latch` or `job` (its last run and\n"
     "outcome, `paused by`, or `running on` while its lock is held; jobs are\n"
     "shown where the server keeps them). AGE and LEASE count on between\n"
     "readings; a column too wide for the terminal is cut with `+`, and control\n"
     "characters in names show as `?`. The snapshot has the same columns, not\n"
     "cut, and no terminal sequences. See docs/cli.md, \"dlock top\".\n",
     .summary = NULL, .common = CLI_COMMON_SERVER, .opts = cli_top_opts},

    {"release", cmd_release,
     "Usage: dlock release --force [OPTIONS] NAME\n"
     "Delete the lock NAME whatever its owner, and wake a waiter. For admins:\n"
     "a 'dlock run' holding NAME is told at once (Redis, PostgreSQL lease\n"
     "mode, ZooKeeper; MySQL: at its next renewal), stops its command as its\n"
     "--on-lost says and exits 79.\n"
     "\n"
     "  --force       required: say that you mean it\n"
     "  --foreign     also delete a key that dlock did not take (a redis-py\n"
     "                or node-redlock lock); without it such a key is kept\n"
     "  --url URL     Redis to use (default $DLOCK_URL, then local)\n"
     "  --prefix P    key prefix of lock names (see 'dlock config')\n"
     "  -q, --quiet   do not say whether a lock was deleted\n"
     "  -h, --help    this help\n"
     "\n"
     "Exit status: 0 (also when NAME was not held), 64 usage error or a key\n"
     "dlock did not take (without --foreign), 69 Redis unreachable or\n"
     "authentication failed, 70 internal error.\n",
     "There is no release without `--force`: a lock belongs to its holder,\n"
     "which releases it when its command ends. A key without dlock's record of\n"
     "its hold (in `{NAME}:fence`) may be an application's own data under a mistyped name,\n"
     "so it is deleted only with `--foreign`; check it with `dlock status`\n"
     "(\"held by something other than dlock\") first.\n",
     .summary = "release --force NAME\tdelete a lock whatever its owner (admin)", .common = CLI_COMMON_SERVER,
     .opts = cli_release_opts},

    {"elect", cmd_run,
     "Usage: dlock elect [OPTIONS] NAME [--] COMMAND [ARGS...]\n"
     "       dlock elect --resign NAME | --evict NAME\n"
     "Stand for leader of the election NAME; run COMMAND only while leading. On\n"
     "loss its process group gets SIGTERM, SIGKILL after --grace; SIGTERM to\n"
     "dlock ends COMMAND and resigns: the next candidate leads at once.\n"
     "\n"
     "  --url URL, --prefix P  server, key prefix (default: see 'dlock config')\n"
     "  --value V              the leader's value, shown to all (default: host)\n"
     "  -l, --lease DURATION   lease, renewed every third of it (default 15s)\n"
     "  -w, --wait DURATION    stand for this long at most (default: forever)\n"
     "  --grace DURATION       SIGTERM so long before the lease ends; SIGKILL at it\n"
     "  --active-file PATH     'EPOCH VALUE' in PATH while leading, removed on loss\n"
     "  --on-elected SIG, --on-lost SIG  COMMAND runs throughout and is told by a\n"
     "                         signal (USR1, HUP, ...); on loss dlock stands again\n"
     "  --shell, -c STRING     COMMAND as one string for sh -c\n"
     "  -E/--conflict-exit-code N, --lost-exit-code N  exit: not elected; lost\n"
     "  -q/--quiet, -v/--verbose  errors only; say when leading, with the epoch\n"
     "  --resign NAME, --evict NAME  step down if this host leads; force out (admin)\n"
     "  --metrics-file F, --metrics-listen ADDR:PORT, --metrics-interval D,\n"
     "  --log-format json      as for cron\n"
     "\n"
     "COMMAND gets DLOCK_LEADER_EPOCH (the term's fence, for 'dlock fence check')\n"
     "and DLOCK_LEADER_VALUE. Exit: COMMAND's status, 75 not elected in --wait,\n"
     "79 leadership lost, 3 (--resign, --evict) no leader, 64, 69, 70, 126, 127.\n",
     "An election is a lock of the same name: candidates wait in arrival order,\n"
     "the leader's term is a hold renewed by the watchdog, and its epoch is the\n"
     "hold's fence, which rises with every term. A leader paused past its lease\n"
     "(SIGSTOP, a long GC pause, a VM migration) may still believe it leads\n"
     "when it wakes up: guard its writes with the epoch (`dlock fence check\n"
     "RESOURCE \"$DLOCK_LEADER_EPOCH\"`) and the writes of a deposed leader are\n"
     "refused once its successor has written. See docs/election.md.\n"
     "\n"
     "Everything `dlock run` says about signals, the process group, orphans,\n"
     "the terminal and a missing COMMAND holds for `dlock elect`.\n"
     "\n"
     "With `--on-elected SIG` or `--on-lost SIG`, COMMAND is a long-lived process\n"
     "that must be told rather than started and stopped: it starts at once (as a\n"
     "standby, `DLOCK_LEADER_EPOCH=0`), gets SIG when this host leads (the epoch\n"
     "is in `--active-file`), and the `--on-lost` signal (default SIGTERM) when\n"
     "the term is lost, after which dlock campaigns again. When COMMAND ends,\n"
     "dlock resigns and exits with its status.\n"
     "`--resign` and `--evict` end the term they read, by its epoch: a term\n"
     "begun in between is left alone (said, exit 1); on Redlock and MySQL,\n"
     "which cannot check the epoch, they delete the lock as `dlock release\n"
     "--force`. The leader's dlock finds its term lost at its next renewal\n"
     "(a third of its lease at most) and stops COMMAND; the first candidate in\n"
     "line leads at once.\n",
     .summary = "elect NAME -- CMD\trun CMD only while this host leads; 'leader NAME'", .common = CLI_COMMON_SERVER,
     .opts = cli_elect_opts},

    {"leader", cmd_leader,
     "Usage: dlock leader [OPTIONS] NAME\n"
     "Who leads the election NAME, as the server says now: the leader's value,\n"
     "its epoch, since when, and the lease it has left.\n"
     "\n"
     "  --url URL, --prefix P  server, key prefix (default: see 'dlock config')\n"
     "  --json                 one JSON object (leader null when none)\n"
     "  --am-i                 print nothing; exit 0 if this host leads, 1 if\n"
     "                         another does (compares the value with --value)\n"
     "  --value V              this host's value for --am-i (default: host name)\n"
     "  --watch                one line per change of leader (epoch, value, or\n"
     "                         no leader) until SIGINT or SIGTERM\n"
     "  --interval DURATION    --watch: ask the server this often (default 500ms)\n"
     "  -h, --help             this help\n"
     "\n"
     "Exit status: 0 a leader (--am-i: this host), 1 (--am-i) another leads,\n"
     "3 no leader, 64 usage error, 69 server unreachable, 70 internal error.\n"
     "\n"
     "Example (a health check):\n"
     "  dlock leader db-primary --am-i --value \"$(hostname):5432\" && promote\n",
     "`--watch` prints the state found at the start, then every change it\n"
     "sees. It asks the server every `--interval`: two terms that both begin and\n"
     "end within one interval show as one change. See docs/election.md.\n",
     .summary = NULL, .common = CLI_COMMON_SERVER, .opts = cli_leader_opts},

    {"fence", cmd_fence,
     "Usage: dlock fence check [OPTIONS] RESOURCE TOKEN\n"
     "The fencing guard for shell pipelines: compare TOKEN (a holder's fence,\n"
     "e.g. $DLOCK_FENCE) with the highest token recorded for RESOURCE and\n"
     "record it unless it is lower.\n"
     "\n"
     "  --url URL     Redis to use (default $DLOCK_URL, then local)\n"
     "  --prefix P    key prefix of lock names (see 'dlock config')\n"
     "  -q, --quiet   print nothing, only set the exit status\n"
     "  --json        print {resource, token, admitted, highest} as JSON\n"
     "  -h, --help    this help\n"
     "\n"
     "Prints the highest token seen for RESOURCE after the check.\n"
     "Exit status: 0 admitted (go ahead and write), 1 stale (a newer holder has\n"
     "written since: do not write), 64 usage error, 69 Redis unreachable or\n"
     "authentication failed, 70 internal error.\n"
     "\n"
     "Example:\n"
     "  dlock run nightly -- sh -c \\\n"
     "    'make-report > r.tmp && dlock fence check reports \"$DLOCK_FENCE\" &&\n"
     "     mv r.tmp /srv/report'\n",
     "The check and the write are two steps, so the guard protects a resource\n"
     "only as far as every writer checks right before writing; a store that\n"
     "can compare the token itself in the same transaction is stronger.\n"
     "RESOURCE names a Redis key like a lock name does.\n",
     .summary = "fence check RES TOKEN\tfencing guard for shell pipelines", .common = CLI_COMMON_SERVER,
     .opts = cli_fence_opts},

    {"latch", cmd_latch,
     "Usage: dlock latch set NAME COUNT [--expire DURATION]\n"
     "       dlock latch down NAME\n"
     "       dlock latch wait NAME [-w DURATION]\n"
     "       dlock latch count NAME\n"
     "A countdown latch: 'set' starts it at COUNT, each 'down' counts one off,\n"
     "and 'wait' returns once the count is zero (woken at once, by pub/sub).\n"
     "\n"
     "  --url URL, --prefix P  Redis, key prefix (default: see 'dlock config')\n"
     "  --expire DURATION      set: the latch is gone after this long, whatever\n"
     "                         its count (default 1h)\n"
     "  -w, --wait DURATION    wait: give up after DURATION (default: forever)\n"
     "  -q, --quiet            no messages but errors\n"
     "\n"
     "Exit status: 0 done (wait: the count is zero), 75 set: already counting,\n"
     "or wait: not zero within --wait, 79 no such latch (never set, or it\n"
     "expired: an abandoned latch never opens), 64 usage, 69 Redis unreachable.\n"
     "\n"
     "Example:\n"
     "  dlock latch set batch 3; for s in a b c; do\n"
     "    (work $s; dlock latch down batch) & done; dlock latch wait batch\n",
     "'down' on a latch at zero leaves it at zero. 'set' on a latch that is\n"
     "still counting is refused (exit 75); at zero it starts again. A 'down'\n"
     "whose reply is lost is not sent again (each would count): dlock exits 69\n"
     "with an \"outcome unknown\" message, and `dlock latch count` tells. The\n"
     "latch is the Redis hash `{NAME}:latch` (with the prefix); see\n"
     "docs/latch.md. Not on Redlock.\n",
     .summary = "latch set|down|wait N\tcountdown latch: set a count, count down, wait", .common = CLI_COMMON_SERVER,
     .opts = cli_latch_opts},

    {"cron", cmd_cron,
     "Usage: dlock cron 'EXPR' --name JOB [OPTIONS] [--] COMMAND [ARGS...]\n"
     "       dlock cron --next 'EXPR' [-n N] [--from TIME] [--tz ZONE] [--epoch]\n"
     "       dlock cron --history JOB [-n N] [--json] [--url URL]\n"
     "Run COMMAND at cron EXPR's times ('*/5 * * * *', Quartz '0 */5 * * * ?'),\n"
     "once per tick across all nodes running JOB; a line per tick on stderr.\n"
     "\n"
     "  --name JOB             job name: its lock, tick claims and history\n"
     "  --tz ZONE              read EXPR in this IANA zone (default UTC); --unix\n"
     "  --lock-at-most-for D   job lock lease; a longer run is stopped (10m)\n"
     "  --lock-at-least-for D  keep the job lock this long after a start (0)\n"
     "  --overlap skip|allow   a tick during a run: skip it (default) or start\n"
     "  --pool N               worker threads of this node (default 1)\n"
     "  --node NAME            this node's name (default HOST:PID)\n"
     "  --grace D              SIGTERM to SIGKILL when stopping a run (5s)\n"
     "  --shell, --url URL, --prefix P, -q/--quiet, -v/--verbose: as for run\n"
     "  --metrics-file PATH, --metrics-listen ADDR:PORT, --metrics-interval D\n"
     "  --log-format json      one JSON object per log line (time, level, event...)\n"
     "  --next                 the next N fire times (-n, default 5) after --from\n"
     "                         TIME (ISO 8601, @EPOCH; default now); --epoch: as such\n"
     "  --history              JOB's last N runs (-n, default 20), --json\n"
     "\n"
     "COMMAND gets DLOCK_JOB, DLOCK_TICK, DLOCK_FENCE, DLOCK_URL. SIGINT, SIGTERM,\n"
     "SIGHUP: stop, passing the signal to a running COMMAND; exit 128+N. Exit: 64\n"
     "usage or bad EXPR/ZONE, 69 server unreachable, 126/127 cannot run COMMAND.\n",
     "EXPR has 6 or 7 fields, `sec min hour day-of-month month day-of-week\n"
     "[year]`, with Quartz's `* ? , - / L W #` and one of the day fields `?`;\n"
     "an EXPR of 5 fields is classic Unix cron, `min hour day-of-month month\n"
     "day-of-week` (`*/5 * * * *`; `--next` says which reading it used), and\n"
     "`@every D` points to `dlock every D`. As an extension of\n"
     "dlock (Quartz has none), EXPR may be one of `@yearly` (or `@annually`),\n"
     "`@monthly`, `@weekly` (Sunday), `@daily` (or `@midnight`) and `@hourly`,\n"
     "each at the start of its period, at second 0. EXPR is read as wall\n"
     "time in `--tz`: a wall time skipped by a DST change fires shifted by the\n"
     "gap, a repeated one fires once (docs/cron.md). A bad EXPR or zone is a\n"
     "usage error naming the field and column, checked before Redis is\n"
     "contacted; so is an EXPR that never fires again (for `--next` too: exit\n"
     "64). COMMAND needs no `--` when it does not start with `-`.\n"
     "\n"
     "*Once per tick.* Each node's scheduler claims a tick in Redis when its\n"
     "clock reaches it; a tick claimed once is never run again, and runs never\n"
     "overlap: a tick that finds the previous run still holding the job lock is\n"
     "skipped as busy. A tick more than 60 s late (the process was stopped) is\n"
     "skipped as misfired, never run in a burst. A tick that finds every worker\n"
     "of this node busy is not claimed by this node (skipped, pool): it runs\n"
     "only if another node of the job takes it. A node whose\n"
     "clock is more than 5 s ahead of the Redis server's claims nothing, so\n"
     "that it cannot make the others skip ticks, and logs \"not claimed: this\n"
     "node's clock is N s ahead ...\" for each tick until its clock is fixed.\n"
     "\n"
     "*The run.* COMMAND runs in its own process group, with `DLOCK_JOB` (the\n"
     "job name), `DLOCK_TICK` (the tick's scheduled time in epoch seconds;\n"
     "`DLOCK_TICK_MS` in milliseconds), `DLOCK_FENCE` (the run's fencing token),\n"
     "`DLOCK_NODE`, `DLOCK_URL` and `DLOCK_TRIGGER` (`tick`, or `manual` for a\n"
     "run of `dlock job trigger`, whose time is then `DLOCK_TICK`). Its result\n"
     "is its exit status (128+N when\n"
     "killed by signal N), logged as `exit 0` or `failed (exit N)` and recorded\n"
     "in the history as `ok` or `failed: N`. When\n"
     "it ends, what it left in its group gets SIGTERM, then SIGKILL after\n"
     "`--grace`. A run still going after `--lock-at-most-for` has lost its job\n"
     "lock (another node may start the next tick), so it is stopped the same\n"
     "way: choose that lease well above the longest run.\n"
     "\n"
     "*Stopping.* SIGINT, SIGTERM or SIGHUP stops the scheduler (no new ticks),\n"
     "passes the signal to the group of a running COMMAND, sends SIGKILL after\n"
     "`--grace`, records the run and exits 128+N (143 for SIGTERM; systemd:\n"
     "`SuccessExitStatus=143`). A signal ignored at start (nohup) stays ignored.\n"
     "If dlock is killed (SIGKILL), COMMAND gets SIGTERM, and the job lock\n"
     "blocks later ticks until `--lock-at-most-for` ends.\n"
     "\n"
     "*Metrics* (`cron`, `every`, `elect`; docs/metrics.md): `--metrics-file PATH`\n"
     "writes the client's metrics in the Prometheus text format to PATH every\n"
     "`--metrics-interval` (default 10s) and at exit, atomically (a temporary\n"
     "file beside it, renamed), for node_exporter's textfile collector;\n"
     "`--metrics-listen ADDR:PORT` (`127.0.0.1:9464`, `[::1]:9464`) serves them\n"
     "at `http://ADDR:PORT/metrics`, as OpenMetrics when the scraper asks. The\n"
     "job's (election's) name labels its series. A port in use: exit 69.\n"
     "`--log-format json` (`cron`, `every`, and `run`, `hold`, `elect`) writes\n"
     "each log line as one JSON object: `time`, `level` (`info`, `warning`,\n"
     "`error`), `event` (`ran`, `skipped`, `skipped_busy`, `skipped_pool`,\n"
     "`skipped_paused`, `misfired`, `error`, `clock_skew`, `message`; run's in\n"
     "docs/metrics.md), `job`, `name`, `host`, `pid`, and as they apply `tick`,\n"
     "`tick_unix_ms`, `node`, `fence`, `duration_ms`, `exit`, `message`.\n"
     "\n"
     "`--next` needs no Redis: it prints the next N (at most 1000) fire times\n"
     "strictly after `--from` (default now), ISO 8601 with the offset of\n"
     "`--tz`. TIME is ISO 8601 (`2026-03-29T02:30:00+01:00`, `...Z`, or wall\n"
     "time in `--tz`) or `@EPOCH`. `--history` prints, newest first, the\n"
     "scheduled time, node, fence, start (Redis server clock), duration and\n"
     "outcome of each run, and of each tick skipped as busy; with `--json` an\n"
     "array of objects with `node`, `fence`, `scheduled_unix_ms`, `scheduled`,\n"
     "`start_unix_ms`, `start`, `duration_ms` (-1: skipped) and `outcome`.\n",
     .summary = "cron EXPR ... -- CMD\trun CMD on cron ticks, once per tick fleet-wide", .common = CLI_COMMON_SERVER,
     .opts = cli_cron_opts},

    {"every", cmd_every,
     "Usage: dlock every DURATION --name JOB [OPTIONS] [--] COMMAND [ARGS...]\n"
     "Run COMMAND every DURATION, once per tick across all nodes running JOB.\n"
     "Runs in the foreground; one line per tick on stderr, as 'dlock cron'.\n"
     "\n"
     "Fixed rate (default): ticks on the epoch-aligned grid (every 10s: :00, :10,\n"
     "...), so all nodes agree on them; a tick that finds the previous run still\n"
     "going is skipped, never queued. --fixed-delay: a run starts DURATION after\n"
     "the previous one ended, on whichever node (Redis server's clock).\n"
     "\n"
     "  --name JOB             job name: its lock, tick claims and history\n"
     "  --fixed-delay          fixed delay instead of fixed rate\n"
     "  --lock-at-most-for D   job lock lease; a longer run is stopped (10m)\n"
     "  --lock-at-least-for D  keep the job lock this long after a start (0)\n"
     "  --overlap skip|allow   a tick during a run: skip it (default) or start\n"
     "  --pool N               worker threads of this node (default 1)\n"
     "  --node NAME            this node's name (default HOST:PID)\n"
     "  --grace D              SIGTERM to SIGKILL when stopping a run (5s)\n"
     "  --tz ZONE              show times in this zone (default UTC)\n"
     "  --shell, --url URL, --prefix P, -q/--quiet, -v/--verbose: as for run\n"
     "  --metrics-file, --metrics-listen, --metrics-interval, --log-format: as cron\n"
     "\n"
     "DURATION, D: 250ms, 10s, 1m30s, 1h; DURATION at least 100ms. COMMAND's\n"
     "environment, signals and exit status: as for 'dlock cron'.\n"
     "'dlock cron --history JOB' shows the runs.\n",
     "Fixed rate: a tick is a multiple of DURATION since the epoch, fired by\n"
     "each node's clock and claimed once in Redis, so nodes need not talk to\n"
     "each other and a node whose clock lags finds its ticks taken (one more\n"
     "than 5 s ahead of the Redis server claims none, as for cron). A tick\n"
     "more than one DURATION late is skipped as misfired.\n"
     "\n"
     "Fixed delay: the end of each run is recorded in Redis on the server's\n"
     "clock; the next run, on any node, starts DURATION after it, so runs\n"
     "never overlap and the fleet does not drift. `DLOCK_TICK` is then the\n"
     "time the run became due.\n",
     .summary = "every DUR ... -- CMD\tthe same at a fixed rate or delay (DUR: 10s, 5m)", .common = CLI_COMMON_SERVER,
     .opts = cli_every_opts},

    {"job", cmd_job,
     "Usage: dlock job pause JOB [--reason TEXT] | resume JOB | trigger JOB\n"
     "       dlock job list [PATTERN] [--json] | history JOB [-n N] [--json]\n"
     "       dlock job check JOB --max-age D [--critical D]\n"
     "Operate the jobs that 'dlock cron' and 'dlock every' run, on every node at\n"
     "once: the state is kept on the server under the job's name.\n"
     "\n"
     "  pause JOB              skip its ticks (recorded as skipped) until resumed;\n"
     "                         a run in progress goes on\n"
     "  resume JOB             run it again from its next tick\n"
     "  trigger JOB            one extra run now, on exactly one node, recorded\n"
     "                         as manual (when the previous run has ended)\n"
     "  list [PATTERN]         jobs: paused, pending trigger, last run, last success\n"
     "  history JOB            the last N runs (-n, default 20), with trigger kind\n"
     "  check JOB --max-age D  exit 0 when the last success is younger than D,\n"
     "                         1 (warning) older, 2 (critical) older than\n"
     "                         --critical (default 2*D) or none; 3 unknown\n"
     "  --reason TEXT, --by WHO  why and who (default USER@HOST), kept with it\n"
     "  --json, --tz ZONE, -q/--quiet, --url URL, --prefix P\n"
     "\n"
     "Exit: 0 done (also when there was nothing to do: it says so), 64 usage,\n"
     "69 server unreachable; check: Nagios codes, one line on stdout.\n",
     "A paused job's ticks are still claimed, once each, and recorded in the\n"
     "history as `skipped: paused by WHO: REASON`, so the history shows every\n"
     "decision. A trigger wakes the running nodes at once through the\n"
     "server's notification (Redis pub/sub, PostgreSQL NOTIFY, a ZooKeeper\n"
     "watch; MySQL: a re-read every second); one of them claims it like a tick\n"
     "(fenced, once), also while the job is paused. One trigger is pending at\n"
     "a time; it waits while the previous run holds the job lock. Not on\n"
     "Redlock. `check` measures the age of the last success (from the history,\n"
     "server times) by this host's clock; its line carries the age as Nagios\n"
     "performance data. See docs/scheduler.md, \"Operations\".\n",
     .summary = "job VERB JOB\tpause, resume, trigger a job; its list, history, check", .common = CLI_COMMON_SERVER,
     .opts = cli_job_opts},

    {"serve", cmd_serve,
     "Usage: dlock serve [--listen ADDR:PORT | --socket PATH] [--token-file F]\n"
     "                   [--url URL] [--prefix P]\n"
     "An agent that holds locks for programs in any language over HTTP/JSON\n"
     "(docs/agent.md): POST /v1/locks/NAME/acquire waits, then answers with a\n"
     "stream of server-sent events on which the hold lives (acquired, with the\n"
     "holder id and fence; renewed; lost, at the local deadline at the latest;\n"
     "released). The agent renews the lease while the stream is open; closing\n"
     "it releases the lock. Also .../release, .../extend, GET /v1/locks/NAME,\n"
     "/v1/health and /metrics.\n"
     "\n"
     "  --listen ADDR:PORT  TCP address (default 127.0.0.1:7457); beyond\n"
     "                      loopback only with --token-file\n"
     "  --socket PATH       a unix socket instead, mode 0600 (--socket-mode M)\n"
     "  --token-file F      first line: the token every change (POST) needs as\n"
     "                      'Authorization: Bearer'; without it TCP is read-only\n"
     "  --url URL           the server (default $DLOCK_URL, then the config)\n"
     "  --prefix P          key prefix\n"
     "\n"
     "SIGTERM, SIGINT: every lock held for clients is released, waits end\n"
     "(503), then exit 0.\n"
     "Exit status: 0 stopped by a signal, 64 usage, 69 server or port unusable.\n",
     "The token is read from the file only (never from the command line or\n"
     "the environment) and never printed. A name in a path is percent-encoded\n"
     "(`/v1/locks/app%2Fdb/acquire` for `app/db`); names with control bytes,\n"
     "braces or invalid UTF-8 are refused (400), as are bodies over 64 KiB\n"
     "(413), bad JSON and unknown fields (400). See docs/agent.md and\n"
     "docs/agent.openapi.yaml.\n",
     .summary = NULL, .common = CLI_COMMON_SERVER, .opts = cli_serve_opts},

    {"bench", cmd_bench,
     "Usage: dlock bench [--quick] [--scenario NAME[,NAME...]] [--json FILE]\n"
     "                   [--url URL] [--layout cross|same|none]\n"
     "                   [--watchdog-locks N] [--watchdog-lease MS]\n"
     "                   [--watchdog-hold MS] [--no-peers] [--peers-dir DIR]\n"
     "Measure libdlock against a real redis-server: a private one on a free\n"
     "loopback port unless --url is given. Progress on stderr, a table at the\n"
     "end, all figures as JSON with --json.\n"
     "\n"
     "Scenarios (default: all):\n"
     "  floor        PING round trip on one connection\n"
     "  uncontended  acquire+release on one thread, vs a bare hiredis client\n"
     "  throughput   1, 8 and 64 threads on one client, vs redis-benchmark\n"
     "  contended    K processes on one lock: hand-off latency, fairness, cost\n"
     "  watchdog     thousands of held locks renewed by one watchdog\n"
     "  scheduler    cron next-fire computations per second\n"
     "  peers        redis-py and node-redlock beside dlock, and the ratios\n"
     "  semaphore, rwlock  each beside the mutex: uncontended cycle, hand-off\n"
     "\n"
     "  --quick      about a second per scenario (a smoke run)\n"
     "  --layout L   cross: Redis on CPU 0, the bench on CPU 1 (default);\n"
     "               same: both on CPU 0; none: no pinning\n"
     "  --no-peers   skip the peers; --peers-dir DIR: where (default bench/peers)\n"
     "PostgreSQL --url: floor (advisory locks), uncontended, contended; only\n"
     "--quick applies. Results, machine and targets: docs/PERFORMANCE.md.\n",
     "With a PostgreSQL `--url` (`postgresql://`, `postgres://` or libpq's\n"
     "keyword/value form), `dlock bench` measures PostgreSQL itself, in the same\n"
     "run: the floor (`pg_advisory_lock` + `pg_advisory_unlock` on one libpq\n"
     "connection), uncontended acquire + release through the lease table, and 4\n"
     "processes contending for one lock, with advisory locks (the contended\n"
     "floor) and with dlock, each checking an unguarded counter; the contended\n"
     "rows give the hand-off latency (from just before a release to the next\n"
     "holder's acquire returning).\n"
     "\n"
     "`dlock bench` runs `dlock-bench`, built from the same tree (bench/) and\n"
     "installed beside `dlock`. Figures from different runs or CPU layouts are\n"
     "not comparable: a round trip between processes on one core differs from\n"
     "one across cores, so every table states its layout. These are\n"
     "measurements, not tests; the test suite runs only `--quick` to check that\n"
     "every scenario still completes and stays correct.\n",
     .summary = NULL, .common = 0, .opts = NULL},

    {"doctor", cmd_doctor,
     "Usage: dlock doctor [--url URL] [--prefix P] [--json]\n"
     "Check that the Redis server is fit to hold locks, with the rights of the\n"
     "URL's user. One line per check, OK, WARN or FAIL, with the fix:\n"
     "\n"
     "  eviction     maxmemory-policy must be noeviction (every dlock key has a\n"
     "               TTL, so allkeys-* and volatile-* may evict held locks)\n"
     "  persistence  AOF or RDB: what a restart keeps\n"
     "  replication  replicas, and min-replicas-to-write against failovers\n"
     "  clock        the server's clock against this host's (skew)\n"
     "  scripts      EVALSHA/EVAL: takes and releases the lock 'dlock-doctor'\n"
     "  pubsub       PUBLISH and SUBSCRIBE on the hand-off channels (a cluster:\n"
     "               SPUBLISH and SSUBSCRIBE on the master of the probe's slot)\n"
     "PostgreSQL: server (version, user), read-only (a standby), rights (schema,\n"
     "tables: dlock init, GRANT), clock, notifications (LISTEN via a pooler).\n"
     "\n"
     "  --url URL    server to check (default $DLOCK_URL, then local Redis)\n"
     "  --json       one JSON object: server, ok, checks [{name, level, found,\n"
     "               fix}], skew_ms on the clock check\n"
     "\n"
     "Exit status: 0 nothing FAILed (WARNs allowed), 1 a check FAILed or Redis\n"
     "cannot be used at all, 64 usage error.\n",
     "Settings that the user may not read (INFO or CONFIG denied by the ACL)\n"
     "are a WARN that says so. Every other command also warns on stderr,\n"
     "once, when the server's maxmemory-policy can evict lock keys:\n"
     "`CONFIG SET maxmemory-policy noeviction` and the same line in\n"
     "redis.conf fix it.\n",
     .summary = "doctor, serve\tis the server fit for locks; an HTTP agent for locks", .common = CLI_COMMON_SERVER,
     .opts = cli_doctor_opts},

    {"init", cmd_init,
     "Usage: dlock init [--url URL]\n"
     "Create what dlock needs on the server, ahead of time. On PostgreSQL:\n"
     "dlock's schema (dlock_schema=NAME in the URL, default dlock), its tables,\n"
     "sequences and functions, created IF NOT EXISTS, so running it again is\n"
     "safe. dlock creates them on first use too; run init once as a user with\n"
     "CREATE rights on the database when the users that take locks have none,\n"
     "then grant those users (docs/postgres.md):\n"
     "\n"
     "  GRANT USAGE ON SCHEMA dlock TO app;\n"
     "  GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA dlock TO app;\n"
     "  GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA dlock TO app;\n"
     "\n"
     "Redis needs nothing: init says so and exits 0.\n"
     "\n"
     "  --url URL    the server (default $DLOCK_URL, then the config files)\n"
     "\n"
     "Exit status: 0 done, 64 usage, 69 the server cannot be used (no rights:\n"
     "the message says which), 70 bug.\n",
     NULL, .summary = "init, prune\tcreate dlock's tables; delete old rows (PostgreSQL)", .common = CLI_COMMON_URL,
     .opts = cli_init_opts},

    {"prune", cmd_prune,
     "Usage: dlock prune [--older-than DURATION] [--url URL]\n"
     "Delete what the server keeps of locks that no one holds or waits for any\n"
     "more, whose time ended more than DURATION ago (default 1h). On\n"
     "PostgreSQL: the rows of released and expired locks (one per name ever\n"
     "locked), of waiters that died, of semaphores and read-write locks with no\n"
     "hold left; in batches of 1000 rows per table until none is left. Never a\n"
     "live hold or waiter; fences keep rising (they come from a sequence); the\n"
     "fence guards and the scheduler's rows stay. Each release also prunes rows\n"
     "older than an hour, at most once a minute per client, 100 at a time.\n"
     "Redis and ZooKeeper keep nothing to prune: prune says so and exits 0.\n"
     "\n"
     "  --older-than DURATION  only what ended this long ago (0: all that ended)\n"
     "  --url URL              the server (default $DLOCK_URL, then the config)\n"
     "\n"
     "Exit status: 0 done, 64 usage, 69 the server cannot be used (no rights:\n"
     "the message says which), 70 bug.\n",
     "A release whose reply was lost is sent again and recognises its own\n"
     "released row; with `--older-than 0` that row may be gone already, and the\n"
     "second release then answers from the hold's own deadline, as after any\n"
     "lost reply (docs/postgres.md, \"Lost replies\").\n",
     .summary = NULL, .common = CLI_COMMON_URL, .opts = cli_prune_opts},

    {"demo", cmd_demo,
     "Usage: dlock demo [OPTIONS]\n"
     "Show what a distributed lock and fencing tokens are for, in seconds:\n"
     "\n"
     "  1. 50 workers x 10 stock deductions over 5 SKUs, first with no lock\n"
     "     (lost updates, oversell), then with one dlock per SKU (exact);\n"
     "  2. a \"zombie\" worker frozen past its lease tries to write after a\n"
     "     newer holder did: the fencing token rejects its write;\n"
     "  3. a scheduled job \"close unpaid orders\", every second on 3 nodes\n"
     "     for 5 ticks: each tick runs once, on one node.\n"
     "\n"
     "The stock lives in this process's memory; the locks live in Redis.\n"
     "Without --url or $DLOCK_URL, dlock demo starts a private redis-server\n"
     "(temporary directory, free loopback port, no persistence) and stops it\n"
     "when done or interrupted.\n"
     "\n"
     "  --url URL     use this Redis instead (keys start with 'dlock-demo:')\n"
     "  --prefix P    key prefix put before that\n"
     "  -h, --help    this help\n"
     "\n"
     "Exit status: 0 when the locked run was exact, the zombie was fenced off\n"
     "and each tick ran once; 69 Redis unreachable or redis-server missing, 70\n"
     "otherwise.\n",
     "Each worker is a thread with its own lock handles, sharing one client:\n"
     "the workers contend through Redis as separate processes would. A\n"
     "deduction reads the stock, \"works\" for a millisecond or two, then\n"
     "writes the stock minus one and counts a sale, refusing when the stock is\n"
     "zero. Without a lock, reads and writes of different workers interleave:\n"
     "sales exceed what left the stock. With the lock the books balance.\n"
     "\n"
     "The three \"nodes\" of the scheduler scene are three schedulers\n"
     "(`dlock_sched`) in the demo process, named node-1 to node-3, each firing\n"
     "the job by its own clock: without coordination each would run every\n"
     "tick. The table shows which node ran each tick and which skipped it.\n",
     .summary = "demo, bench\tlocal races and fences; latency, hand-off, renewal", .common = CLI_COMMON_SERVER,
     .opts = cli_demo_opts},

    {"config", cmd_config,
     "Usage: dlock config show [--url URL] [--prefix P] [--json]\n"
     "Print ('show' is the default) the settings dlock uses and where each\n"
     "comes from: a flag, the environment, the user's file, the system's file\n"
     "or the default. The URL's password is shown as ***.\n"
     "\n"
     "  --url URL, --prefix P  as given to other commands (they win over all)\n"
     "  --json        print {settings: {KEY: {value, source}}, files: [...]}\n"
     "\n"
     "Files: $XDG_CONFIG_HOME/dlock/config (default ~/.config/dlock/config),\n"
     "then /etc/dlock.conf; lines \"key = value\", '#' starts a comment line.\n"
     "Keys: url, prefix, tls_ca_file, tls_cert_file, tls_key_file,\n"
     "tls_server_name, connect_timeout, command_timeout (durations, 2s),\n"
     "password_file (--password-file F: the password, its first line).\n"
     "Environment: DLOCK_URL, DLOCK_PREFIX, DLOCK_PASSWORD_FILE. A flag beats\n"
     "the environment, which beats the user's file, which beats the system's.\n"
     "\n"
     "Exit status: 0, 64 usage error or a bad config file (named with its line).\n",
     "Every command that talks to Redis reads the same settings, so `dlock\n"
     "config show` prints what `dlock run` would use. An unknown key, a line\n"
     "without `=` or a bad duration is an error naming `FILE:LINE`, for every\n"
     "command: a typo is never silently ignored. A missing file is no error.\n"
     "`DLOCK_SYSTEM_CONFIG` names another system file (for tests).\n",
     .summary = "config [show], version\tthe settings in use and their sources; versions", .common = CLI_COMMON_SERVER,
     .opts = cli_config_opts},

    {"version", cmd_version,
     "Usage: dlock version\n"
     "Print the version of dlock and, when another libdlock is loaded at run\n"
     "time, the library's (dlock_version()). The same as 'dlock --version'.\n",
     NULL, .summary = NULL, .common = 0, .opts = NULL},

    {"help", cmd_help,
     "Usage: dlock help [COMMAND]\n"
     "       dlock help --markdown | --roff\n"
     "       dlock help --completion bash|zsh\n"
     "Print the help of COMMAND (or the overview). --markdown prints the whole\n"
     "manual page in Markdown, as kept in docs/dlock.1.md; --roff the same page\n"
     "for man(1), as installed as dlock.1. --completion prints the completion\n"
     "script for the shell, as installed with dlock.\n",
     NULL, .summary = NULL, .common = 0, .opts = NULL},
};

/* Sections of the manual page that belong to no single command. */
static const char man_tail[] =
    "## DURATIONS\n"
    "\n"
    "A duration is a whole or decimal number with a unit, `250ms`, `10s`,\n"
    "`1.5s`, `5m`, `1h`, `2d`, or several of them from the largest unit to the\n"
    "smallest, each unit once, as Go writes them: `1m30s`, `1h2m`, `1d12h`.\n"
    "Units: `d` (days), `h`, `m`, `s`, `ms`. A bare number counts seconds, as\n"
    "in sleep(1). It must come to a whole number of milliseconds and at most\n"
    "30 days (`30d`). Negative values, spaces, other units and junk are usage\n"
    "errors (exit 64); so is zero where it means nothing (`--lease 0`).\n"
    "`--wait 0` means: try once. Programs using libdlock read durations the\n"
    "same way with `dlock_duration_parse()`.\n"
    "\n"
    "## ENVIRONMENT\n"
    "\n"
    "`DLOCK_URL`\n"
    ":   Redis URL used when `--url` is not given; it wins over the config files:\n"
    "    `redis://`, `rediss://` (TLS), `unix://`, `redis-sentinel://` (the\n"
    "    master of a Sentinel service), `redis-cluster://` or `rediss-cluster://`\n"
    "    (TLS) with the seed nodes of a Redis Cluster, `redlock://` (3 or more\n"
    "    independent masters). See docs/topologies.md and docs/redlock.md.\n"
    "\n"
    "`DLOCK_PREFIX`\n"
    ":   Key prefix used when `--prefix` is not given (the library's\n"
    "    `key_prefix`: `app` and `app:` both put lock `x` at key `app:x`).\n"
    "\n"
    "`XDG_CONFIG_HOME`, `HOME`, `DLOCK_SYSTEM_CONFIG`\n"
    ":   Where the config files are (see FILES).\n"
    "\n"
    "`DLOCK_NAME`, `DLOCK_FENCE`, `DLOCK_URL`, `DLOCK_PREFIX`\n"
    ":   Set by `dlock run` for COMMAND: the lock name, the fencing token of\n"
    "    this hold (decimal), the Redis URL and the key prefix in use.\n"
    "\n"
    "`DLOCK_JOB`, `DLOCK_TICK`, `DLOCK_TICK_MS`, `DLOCK_FENCE`, `DLOCK_NODE`, `DLOCK_URL`, `DLOCK_PREFIX`, "
    "`DLOCK_TRIGGER`\n"
    ":   Set by `dlock cron` and `dlock every` for COMMAND: the job name, the\n"
    "    tick's scheduled time (epoch seconds, milliseconds), the run's fencing\n"
    "    token, the node name, the Redis URL, the key prefix in use and what\n"
    "    started the run (`tick`, or `manual`: `dlock job trigger`).\n"
    "\n"
    "## FILES\n"
    "\n"
    "`$XDG_CONFIG_HOME/dlock/config` (default `~/.config/dlock/config`), `/etc/dlock.conf`\n"
    ":   Settings as `key = value` lines: `url`, `prefix`, `tls_ca_file`,\n"
    "    `tls_cert_file`, `tls_key_file`, `tls_server_name`, `connect_timeout`,\n"
    "    `command_timeout`, `password_file`. Flags win over the environment, the\n"
    "    environment over the user's file, that over the system's (`dlock config\n"
    "    show`).\n"
    "\n"
    "`--password-file F`, `password_file`, `$DLOCK_PASSWORD_FILE`\n"
    ":   Every command that takes `--url` takes the password from the first\n"
    "    line of F instead of the URL, so that it is in no command line (`ps`)\n"
    "    and no command's environment: Redis (all URL kinds), PostgreSQL (over\n"
    "    `PGPASSWORD` and `~/.pgpass`) and MySQL; not ZooKeeper (its digest is in\n"
    "    the URL). A file that others may read is used with a warning.\n"
    "\n"
    "## EXIT STATUS\n"
    "\n"
    "The one table of every exit status of every command.\n"
    "\n"
    "| code | meaning |\n"
    "| --- | --- |\n"
    "| 0 | success; for `run`, COMMAND's own status is passed through; `doctor`: no check failed |\n"
    "| 1 | `status -q`: the lock is free; `fence check`: the token is stale; `doctor`: a check failed or Redis cannot "
    "be used; `leader --am-i`, `elect --resign`: another host leads; `elect --resign`, `--evict`: a term begun since "
    "the leader was read is left alone; `job check`: warning (the last success is older than `--max-age`) |\n"
    "| 2 | `job check`: critical (no success recorded, or older than `--critical`) |\n"
    "| 3 | `leader`, `elect --resign`, `elect --evict`: no one leads the election; `job check`: unknown (the server "
    "could not be asked) |\n"
    "| 64 | usage error (a one-line hint is printed); a bad config file (FILE:LINE); `cron`: a bad expression or zone; "
    "the URL's database does not exist (`/99`); the lock name is another key (wrong type, or a string without expiry "
    "and without dlock metadata); `release --force` of such a key without `--foreign`; `elect --evict`, `elect "
    "--resign`, `release --force` of a Curator LeaderLatch leader (ZooKeeper) |\n"
    "| 69 | the server (Redis, ZooKeeper, PostgreSQL, MySQL) unreachable or timed out, not ready (loading its data, "
    "busy with a script, failing over, starting up: retry later), not the server the URL names (an answer dlock cannot "
    "read), authentication or ACL failure, a read-only replica or standby, Redis out of memory, a Sentinel deployment "
    "that cannot be resolved, replicas that did not acknowledge (`wait_replicas`); an outcome unknown (the server "
    "stopped answering during a call or its cleanup: the message says what may be left, e.g. a lock held until its "
    "lease ends); `demo`: `redis-server` missing |\n"
    "| 70 | internal or unexpected error (a bug: please report it) |\n"
    "| 75 | `run`: the lock was not acquired within `--wait` (`elect`: not elected) (`--multi`: one of the names); `-E "
    "N` (`--conflict-exit-code`) replaces it; `latch set`: the latch is still counting; `latch wait`: not zero within "
    "`--wait` |\n"
    "| 79 | `run`: the lock was lost while COMMAND ran (`elect`: the leadership); `--lost-exit-code N` replaces it; "
    "`latch`: no such latch (never set, or expired) |\n"
    "| 126, 127 | COMMAND is not executable / not found (`run`; `cron` and `every` check at start) |\n"
    "| 128+N | `run`: COMMAND was killed by signal N, or dlock got signal N while waiting; "
    "`cron`, `every`: stopped by signal N |\n"
    "\n"
    "## SEE ALSO\n"
    "\n"
    "flock(1), redis-server(1), sysexits(3); docs/cli.md in the source tree.\n";

const cli_command *cli_commands(size_t *n) {
  *n = sizeof pages / sizeof pages[0];
  return pages;
}

/* The overview's lines after its list of commands (the commands' summaries,
 * cli_command_page()). */
static const char overview_tail[] = "\n"
                                    "Server: --url URL, else $DLOCK_URL, else the config files, else local;\n"
                                    "  key prefix: --prefix P, else $DLOCK_PREFIX, else the config files.\n"
                                    "  redis://[user:pass@]host[:port][/db], rediss://, unix://, redlock://, zk://,\n"
                                    "  redis-cluster://, redis-sentinel://, postgresql://, mysql://, mariadb://\n"
                                    "Exit status: 0 ok, 64 usage, 69 no server, 70 bug, 75 busy, 79 lost: dlock(1)\n"
                                    "Help: 'dlock help COMMAND' or 'dlock COMMAND --help', dlock(1), --version.\n";

const char *cli_command_page(const cli_command *c) {
  static char overview[4096];

  if (c->name != NULL) return c->page;
  if (overview[0] == '\0') {
    /* "  SYNOPSIS  SUMMARY", one line per command that has a summary, in
     * the table's order. */
    size_t len = (size_t)snprintf(overview, sizeof overview, "%s", c->page);
    for (size_t i = 0; i < sizeof pages / sizeof pages[0] && len < sizeof overview; i++) {
      const char *sum = pages[i].summary, *tab = sum != NULL ? strchr(sum, '\t') : NULL;
      if (tab != NULL)
        len +=
            (size_t)snprintf(overview + len, sizeof overview - len, "  %-22.*s  %s\n", (int)(tab - sum), sum, tab + 1);
    }
    if (len < sizeof overview) snprintf(overview + len, sizeof overview - len, "%s", overview_tail);
  }
  return overview;
}

const char *cli_help_man_tail(void) { return man_tail; }

const cli_command *cli_command_find(const char *name) {
  for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
    if (name == NULL && pages[i].name == NULL) return &pages[i];
    if (name != NULL && pages[i].name != NULL && strcmp(name, pages[i].name) == 0) return &pages[i];
  }
  return NULL;
}

int cli_help_print(FILE *out, const char *command) {
  const cli_command *p = cli_command_find(command);
  if (p == NULL) return -1;
  fputs(cli_command_page(p), out);
  return 0;
}

void cli_help_markdown(FILE *out) {
  const cli_command *top = cli_command_find(NULL);

  fputs("<!-- Generated by 'dlock help --markdown' from cli/help.c. "
        "Do not edit. -->\n",
        out);
  fprintf(out, "# dlock(1) - distributed locks on Redis, from the shell\n\n");
  fprintf(out, "dlock %s\n\n", DLOCK_VERSION);
  fprintf(out, "## SYNOPSIS\n\n```text\n%s```\n\n", cli_command_page(top));
  fprintf(out, "## DESCRIPTION\n\n%s\n", top->more);
  fprintf(out, "## COMMANDS\n\n");
  for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
    if (pages[i].name == NULL) continue;
    fprintf(out, "### dlock %s\n\n```text\n%s```\n\n", pages[i].name, pages[i].page);
    if (pages[i].more != NULL) fprintf(out, "%s\n", pages[i].more);
  }
  fputs(man_tail, out);
}

int cli_usage_error(const char *command, const char *fmt, ...) {
  va_list ap;

  fputs("dlock: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (command != NULL)
    fprintf(stderr, "; see 'dlock %s --help'\n", command);
  else
    fputs("; see 'dlock --help'\n", stderr);
  return CLI_EXIT_USAGE;
}

int cmd_help(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
    cli_help_markdown(stdout);
    return CLI_EXIT_OK;
  }
  if (argc == 2 && strcmp(argv[1], "--roff") == 0) {
    cli_help_roff(stdout);
    return CLI_EXIT_OK;
  }
  if (argc == 3 && strcmp(argv[1], "--completion") == 0) {
    if (cli_help_completion(stdout, argv[2]) != 0)
      return cli_usage_error("help", "--completion: no script for '%s' (bash or zsh)", argv[2]);
    return CLI_EXIT_OK;
  }
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    cli_help_print(stdout, "help");
    return CLI_EXIT_OK;
  }
  if (argc == 1) {
    cli_help_print(stdout, NULL);
    return CLI_EXIT_OK;
  }
  if (argc == 2 && argv[1][0] != '-' && cli_help_print(stdout, argv[1]) == 0) return CLI_EXIT_OK;
  if (argc == 2 && argv[1][0] != '-')
    return cli_usage_error(NULL, "no help on '%s': there is no such command", argv[1]);
  return cli_usage_error("help", "expected a command name, --markdown, --roff or --completion SHELL");
}
