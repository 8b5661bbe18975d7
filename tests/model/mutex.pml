/* The Redis mutex of dlock (src/redis/lua/acquire.lua, release.lua,
 * extend.lua, withdraw.lua, prelude.lua; src/core/mutex.c, watchdog.c) as a
 * SPIN model: acquire, the wait queue, the FIFO hand-off with nonces,
 * watchdog renewals and the caller's extends (with the overlap rule),
 * release, withdraw and fences, with replies that never come (the call may
 * have run, may run later, or never), lost hand-off messages and lease
 * expiry on one clock. docs/model.md says what it covers and leaves out.
 *
 * Properties (assertions, checked in every state):
 *   P1  a hold that counts (has && now < vu) owns the key: the local
 *       deadline never outlives the key, so there are never two holders;
 *   P2  a hold that starts counting has a larger fence than every hold
 *       that counted before it.
 *
 * Mutations (-DBUG_...) each break one rule the code relies on; the model
 * must find a violation for each (tests/model/run.sh checks that it does).
 */

#ifndef NCLI
#define NCLI 2
#endif
#ifndef MAXT
#define MAXT 8
#endif
#ifndef LEASE
#define LEASE 3    /* the watchdog's lease, and the acquire's */
#endif
#ifndef CLAIM
#define CLAIM 2    /* the lease of a hand-off */
#endif
#ifndef SHORT
#define SHORT 1    /* the caller's extend: shorter ... */
#endif
#ifndef LONG
#define LONG 4     /* ... or longer than the watchdog's lease */
#endif
#ifndef REG
#define REG 3      /* a waiter's registration lives this long */
#endif
#ifndef MAXLOSS
#define MAXLOSS 2  /* replies that never come, all clients together */
#endif
#ifndef MAXDROP
#define MAXDROP 1  /* hand-off messages lost */
#endif
#ifndef ROUNDS
#define ROUNDS 2   /* acquisitions per client */
#endif

#define ACQ  1     /* acquire.lua, try only */
#define ACQQ 2     /* acquire.lua, queue when held */
#define EXT  3     /* extend.lua */
#define REL  4     /* release.lua */
#define WD   5     /* withdraw.lua */
#define R_OK 1     /* acquired / extended / released */
#define R_NO 2     /* not acquired (queued, for ACQQ) / not ours */

#define FREE 0     /* a connection's call: none, */
#define SENT 1     /* sent and not run yet, */
#define DONE 2     /* run, its reply waiting to be read */

typedef call { byte st; byte k; byte t; byte l; byte n; byte code; byte f }

byte now;          /* one clock for Redis and the clients: no drift */

/* ---- Redis: the keys of one lock ---- */
byte key;          /* the token in K, 0: none */
byte kexp;         /* K is gone once now >= kexp */
byte fcount;       /* {K}:fence */
byte holdf;        /* the fence recorded for the hold in K */
byte qn; byte q[NCLI];                        /* {K}:waiters, in arrival order */
bool inq[NCLI]; byte rtok[NCLI]; byte rnonce[NCLI]; byte rexp[NCLI];

/* ---- the connections ---- */
call cc[NCLI];     /* the caller's: acquire, extend, release, withdraw */
call wc[NCLI];     /* the watchdog's renewals */
call oc[NCLI];     /* a call given up on before it ran: it may run later, or never */
bool gm[NCLI]; byte gnonce[NCLI]; byte gfence[NCLI];   /* the newest hand-off message */
byte losses;
byte drops;

/* ---- the clients, as the monitor sees them ---- */
bool has[NCLI];    /* believes it holds */
byte vu[NCLI];     /* its local deadline: the hold counts while now < vu */
byte ctok[NCLI];
byte maxf;         /* the highest fence of a hold that counted */
bool tickw[NCLI]; bool tickq[NCLI];   /* a tick passed since the last renewal / re-check */

#define counts(i) (has[i] && now < vu[i])
#define owns(i)   (key == ctok[i] && now < kexp)
#define MIN(a, b) (((a) < (b)) -> (a) : (b))

active proctype monitor() {   /* P1 */
end:
  atomic {
    (counts(0) && !owns(0)) || (counts(1) && !owns(1))
#if NCLI > 2
    || (counts(2) && !owns(2))
#endif
    -> assert(false)
  }
}

active proctype clock() {
  byte i;
  do
  :: atomic {
       now < MAXT -> now++;
       i = 0;
       do
       :: i < NCLI -> tickw[i] = true; tickq[i] = true; i++
       :: else -> i = 0; break
       od
     }
  :: else -> break
  od
}

/* ---- the scripts: each runs whole, as Lua does in Redis ---- */

inline expire() {
  if
  :: key != 0 && now >= kexp -> key = 0; holdf = 0
  :: else -> skip
  fi
}

inline qdrop(w) {              /* ZREM + HDEL */
  if
  :: inq[w] ->
     j = 0;
     do
     :: j < qn && q[j] != w -> j++
     :: else -> break
     od;
     do
     :: j + 1 < qn -> q[j] = q[j + 1]; j++
     :: else -> break
     od;
     qn--; q[qn] = 0; inq[w] = false; rtok[w] = 0; rnonce[w] = 0; rexp[w] = 0; j = 0
  :: else -> skip
  fi
}

inline take(t, lease) {        /* dlock_take: a new fence, the key */
  fcount++; holdf = fcount; key = t; kexp = now + lease
}

inline grant_next() {          /* dlock_grant_next: the first live waiter */
  g = false;
  do
  :: qn > 0 && !g ->
     w = q[0];
     if
     :: rexp[w] > now ->
        take(rtok[w], CLAIM); g = true;
        if
        :: gm[w] = true; gnonce[w] = rnonce[w]; gfence[w] = holdf
        :: drops < MAXDROP -> drops++
        fi
     :: else -> skip           /* a dead registration */
     fi;
     qdrop(w)
  :: else -> break
  od;
  w = 0
}

inline s_run(i, k, t, l, n) {
  expire();
  if
  :: k == ACQ || k == ACQQ ->                                   /* acquire.lua */
     if
     :: key == 0 -> take(t, l); qdrop(i); code = R_OK; f = holdf
     :: key == t ->              /* ours: a resend, or a hand-off confirmed */
#ifdef BUG_ACQUIRE_SHORTENS
        kexp = now + l;
#else
        if :: kexp < now + l -> kexp = now + l :: else -> skip fi;   /* never shortens */
#endif
        qdrop(i); code = R_OK; f = holdf
     :: key != 0 && key != t ->
        code = R_NO; f = 0;
        if
        :: k == ACQQ ->
           if
           :: !inq[i] -> q[qn] = i; qn++; inq[i] = true
           :: else -> skip
           fi;
           rtok[i] = t; rnonce[i] = n; rexp[i] = now + REG
        :: else -> skip
        fi
     fi
  :: k == EXT ->                                                /* extend.lua */
     if
     :: key == t -> kexp = now + l; code = R_OK
     :: else -> code = R_NO
     fi
  :: k == REL ->                                                /* release.lua */
     if
     :: key == t -> grant_next(); if :: !g -> key = 0; holdf = 0 :: else -> skip fi; code = R_OK
     :: else -> code = R_NO
     fi
  :: k == WD ->                                                 /* withdraw.lua */
     qdrop(i);
     if
     :: key == t -> grant_next(); if :: !g -> key = 0; holdf = 0 :: else -> skip fi
     :: else -> skip
     fi;
     code = R_OK
  fi;
  g = false
}

#define CLEARCALL(c) c.st = FREE; c.k = 0; c.t = 0; c.l = 0; c.n = 0; c.code = 0; c.f = 0

#define serve(c, ii) \
  i = ii; k = c.k; t = c.t; l = c.l; n = c.n; \
  s_run(i, k, t, l, n); c.code = code; c.f = f; c.st = DONE; \
  i = 0; k = 0; t = 0; l = 0; n = 0; code = 0; f = 0

active proctype redis() {
  byte i, j, w, k, t, l, n, code, f; bool g;
end:
  do
  :: atomic { cc[0].st == SENT -> serve(cc[0], 0) }
  :: atomic { wc[0].st == SENT -> serve(wc[0], 0) }
  :: atomic { oc[0].st == SENT -> serve(oc[0], 0); CLEARCALL(oc[0]) }
  :: atomic { oc[0].st == SENT -> CLEARCALL(oc[0]) }             /* never reached Redis */
  :: atomic { cc[1].st == SENT -> serve(cc[1], 1) }
  :: atomic { wc[1].st == SENT -> serve(wc[1], 1) }
  :: atomic { oc[1].st == SENT -> serve(oc[1], 1); CLEARCALL(oc[1]) }
  :: atomic { oc[1].st == SENT -> CLEARCALL(oc[1]) }
#if NCLI > 2
  :: atomic { cc[2].st == SENT -> serve(cc[2], 2) }
  :: atomic { wc[2].st == SENT -> serve(wc[2], 2) }
  :: atomic { oc[2].st == SENT -> serve(oc[2], 2); CLEARCALL(oc[2]) }
  :: atomic { oc[2].st == SENT -> CLEARCALL(oc[2]) }
#endif
  od
}

/* ---- a client: one lock handle and its watchdog ---- */

#define send(c, kind, tk, lease, nc) c.k = kind; c.t = tk; c.l = lease; c.n = nc; c.st = SENT

/* Give up on call c (its reply does not come): it may have run, or may run later. */
#define GIVE_UP(c) \
  losses < MAXLOSS && c.st != FREE && (c.st == DONE || oc[me].st == FREE) -> \
  losses++; \
  if \
  :: c.st == SENT -> oc[me].k = c.k; oc[me].t = c.t; oc[me].l = c.l; oc[me].n = c.n; oc[me].st = SENT \
  :: else -> skip \
  fi; \
  CLEARCALL(c)

inline start_hold(until, fence) {
  has[me] = true; vu[me] = until;
  if
  :: now < until -> assert(fence > maxf); maxf = fence      /* P2 */
  :: else -> skip
  fi
}

proctype client(byte me) {
  byte rounds, tok, nonce, sent, code, f, dl, nx;
  bool queued, resent;
  /* the renewal (w) and the extend (c) in flight: each one's deadline, and
   * the earliest deadline of the other calls in flight during it */
  byte wdl, wothers, cdl, cothers;

idle:
  has[me] = false; code = 0; f = 0;
  if
  :: rounds < ROUNDS -> rounds++
  :: else -> goto done
  fi;
  tok = rounds * NCLI + me + 1; ctok[me] = tok; resent = false;
  if
  :: queued = false
#ifndef NO_QUEUE
  :: queued = true
#endif
  fi;
  atomic {
    nonce = (nonce + 1) % 4; sent = now;
    if
    :: queued -> send(cc[me], ACQQ, tok, LEASE, nonce)
    :: else -> send(cc[me], ACQ, tok, LEASE, nonce)
    fi
  }
acq_wait:
  do
  :: atomic {
       cc[me].st == DONE -> code = cc[me].code; f = cc[me].f; CLEARCALL(cc[me]);
       if
       :: code == R_OK -> start_hold(sent + LEASE, f); code = 0; f = 0; goto hold
       :: code == R_NO && !queued -> goto idle
       :: code == R_NO && queued -> code = 0; f = 0; goto waiting
       fi
     }
  :: atomic { GIVE_UP(cc[me]) } ->
     if
     :: !resent ->          /* acquire is safe to send again; the deadline counts from the first send */
        atomic {
          resent = true;
#ifdef BUG_RESEND_RESETS_DEADLINE
          sent = now;
#endif
          if
          :: queued -> send(cc[me], ACQQ, tok, LEASE, nonce)
          :: else -> send(cc[me], ACQ, tok, LEASE, nonce)
          fi
        }
     :: goto withdraw
     fi
  od;

waiting:                    /* queued: a hand-off message, a re-check, or giving up */
  do
  :: atomic {
       gm[me] ->
       if
#ifdef BUG_HANDOFF_ANY_NONCE
       :: true ->
#else
       :: gnonce[me] == nonce ->
#endif
          f = gfence[me]; gm[me] = false; gnonce[me] = 0; gfence[me] = 0;
          start_hold(sent + CLAIM, f); f = 0; goto hold
       :: gnonce[me] != nonce -> gm[me] = false; gnonce[me] = 0; gfence[me] = 0; goto recheck   /* a wake-up */
       fi
     }
  :: tickq[me] -> goto recheck
  :: goto withdraw
  od;

recheck:
  atomic {
    tickq[me] = false; nonce = (nonce + 1) % 4; sent = now; resent = false;
    send(cc[me], ACQQ, tok, LEASE, nonce)
  }
  goto acq_wait;

withdraw:
  atomic { has[me] = false; send(cc[me], WD, tok, 0, 0) }
  do
  :: atomic { cc[me].st == DONE -> CLEARCALL(cc[me]) } -> break
  :: atomic { GIVE_UP(cc[me]) } -> break
  od;
  goto idle;

hold:
  nx = 0; tickw[me] = false;
  do
  :: atomic { now >= vu[me] -> has[me] = false } -> goto release     /* lost at the deadline */
  :: atomic {                                                        /* the watchdog renews */
       has[me] && wc[me].st == FREE && tickw[me] ->
       tickw[me] = false; wdl = now + LEASE; wothers = 255;
       if :: cc[me].st != FREE -> wothers = cdl; cothers = MIN(cothers, wdl) :: else -> skip fi;
#ifndef BUG_NO_BOUND_AT_SEND
       vu[me] = MIN(vu[me], wdl);
#endif
       send(wc[me], EXT, tok, LEASE, 0)
     }
#ifndef NO_EXTEND
  :: atomic {                                                        /* the caller extends */
       has[me] && cc[me].st == FREE && nx == 0 ->
       nx++;
       if :: dl = SHORT :: dl = LONG fi;
       cdl = now + dl; cothers = 255; dl = 0;
       if :: wc[me].st != FREE -> cothers = wdl; wothers = MIN(wothers, cdl) :: else -> skip fi;
#ifndef BUG_NO_BOUND_AT_SEND
       vu[me] = MIN(vu[me], cdl);
#endif
       send(cc[me], EXT, tok, cdl - now, 0)
     }
#endif
  :: atomic {
       wc[me].st == DONE ->
       if
       :: !has[me] -> skip
       :: has[me] && now >= vu[me] -> has[me] = false     /* too late: a lost hold stays lost */
       :: has[me] && now < vu[me] && wc[me].code == R_OK ->
#ifdef BUG_NO_OVERLAP_MIN
          vu[me] = wdl
#else
          vu[me] = MIN(wdl, wothers)
#endif
       :: has[me] && now < vu[me] && wc[me].code != R_OK -> has[me] = false   /* gone or taken */
       fi;
       CLEARCALL(wc[me]); wdl = 0; wothers = 0
     }
  :: atomic {
       cc[me].st == DONE ->
       if
       :: !has[me] -> skip
       :: has[me] && now >= vu[me] -> has[me] = false
       :: has[me] && now < vu[me] && cc[me].code == R_OK ->
#ifdef BUG_NO_OVERLAP_MIN
          vu[me] = cdl
#else
          vu[me] = MIN(cdl, cothers)
#endif
       :: has[me] && now < vu[me] && cc[me].code != R_OK -> has[me] = false
       fi;
       CLEARCALL(cc[me]); cdl = 0; cothers = 0
     }
  :: atomic {                          /* a renewal's reply never comes: it may have run */
       GIVE_UP(wc[me]);
#ifndef BUG_UNKNOWN_KEEPS_DEADLINE
       vu[me] = MIN(vu[me], wdl);
#endif
       wdl = 0; wothers = 0
     }
  :: atomic {
       GIVE_UP(cc[me]);
#ifndef BUG_UNKNOWN_KEEPS_DEADLINE
       vu[me] = MIN(vu[me], cdl);
#endif
       cdl = 0; cothers = 0
     }
  :: cc[me].st == FREE -> goto release
  od;

release:          /* stops counting first; the outcome changes nothing the model checks */
  atomic {
    has[me] = false; wdl = 0; wothers = 0; cdl = 0; cothers = 0;
    if
    :: wc[me].st == SENT -> oc[me].k = wc[me].k; oc[me].t = wc[me].t; oc[me].l = wc[me].l; oc[me].st = SENT   /* the renewal in flight may still run */
    :: else -> skip
    fi;
    CLEARCALL(wc[me]);
    send(cc[me], REL, tok, 0, 0)
  }
  do
  :: atomic { cc[me].st == DONE -> CLEARCALL(cc[me]) } -> break
  :: atomic { GIVE_UP(cc[me]) } -> break
  od;
  goto idle;

done:
end:
  skip
}

init {
  atomic {
    run client(0); run client(1);
#if NCLI > 2
    run client(2);
#endif
  }
}
