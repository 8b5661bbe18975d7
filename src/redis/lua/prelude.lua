-- prelude.lua: helpers shared by the dlock scripts; prepended to each at build time.
-- Lock scripts get KEYS: 1 lock, 2 fence, 3 meta, 4 queue, 5 waiters (see docs/keys.md).
-- A mutex hold's record (fence, since, owner info) is not in the meta hash but
-- in the fence counter, written with the fence in one call (dlock_hold_of).
-- Every read that can fail (WRONGTYPE) runs before the first write: Redis does not roll
-- a script back when it stops half-way. (acquire.lua's uncontended path takes the key
-- first and undoes that one write itself when a later call fails.)

local FENCE_TTL_MS = 2592000000 -- 30 days, the longest lease dlock accepts

local function dlock_now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function dlock_num(n)
  return string.format('%.0f', n)
end

-- Tell the watchers (dlock_watch, src/redis/watch.c) that lock keys[1] may
-- have changed: "ev" on its sharded channel {K}:ev (Redis 7 and later);
-- 'msg' another payload ("ev 1 1": a forced release). pcall: without the
-- channel in the ACL the change itself still stands.
local function dlock_event(keys, msg)
  if redis.REDIS_VERSION_NUM then redis.pcall('SPUBLISH', '{' .. keys[1] .. '}:ev', msg or 'ev') end
end

-- Fail (before any write) if 'key' holds a type other than 'want'.
local function dlock_check_type(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE dlock key ' .. key .. ' holds a ' .. t .. ', expected a ' .. want)
  end
  return nil
end

local function dlock_check_lock_keys(keys)
  return dlock_check_type(keys[2], 'string') or dlock_check_type(keys[3], 'hash')
      or dlock_check_type(keys[4], 'zset') or dlock_check_type(keys[5], 'hash')
end

-- Fencing tokens are decimal strings, never Lua numbers: those are doubles,
-- which round above 2^53 (and turned 1e20 into the same token every time).
-- A token is an integer in 1..2^63-1 (what Redis INCR can count to), so a
-- counter that can still rise holds 0..2^63-2. Comparison: by length, then
-- by digits (canonical strings: no sign, no leading zeros).
local FENCE_MAX = '9223372036854775807'
local FENCE_LAST_COUNTER = '9223372036854775806'

-- Is 's' a canonical integer in 0..'max' (a 19-digit decimal string)?
local function dlock_fence_ok(s, max)
  local n = #s
  if n < 19 then return n > 0 and (string.find(s, '^[1-9]%d*$') ~= nil or s == '0') end
  -- 19 digits: a leading zero is not canonical ('0000000000000000007' would
  -- compare above every real token), so it is refused like any other junk.
  return n == 19 and string.find(s, '^[1-9]%d*$') ~= nil and s <= max
end

local function dlock_fence_lt(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- 's' + 1 for a canonical decimal string: bump the digit before the trailing 9s.
local function dlock_fence_incr(s)
  local head, nines = string.match(s, '^(.-)(9*)$')
  local zeros = string.rep('0', #nines)
  if head == '' then return '1' .. zeros end
  return string.sub(head, 1, -2) .. string.char(string.byte(head, -1) + 1) .. zeros
end

-- What a key that should hold a token holds, quoted for an error message.
local function dlock_shown(v)
  local shown = string.gsub(string.sub(v, 1, 40), '[^%w%p ]', '?')
  if #v > 40 then shown = shown .. '...' end
  return "'" .. shown .. "'"
end

-- The next fencing token: above the last one issued for this lock (the
-- counter at 'fence_key'), and never below the server clock in microseconds,
-- so that tokens keep rising even after the counter was lost (restart
-- without persistence, FLUSHALL). Reads only. Returns the token, or nil and
-- an error reply when the counter holds anything else: a repeated token
-- would let two holders past a guard. dlock_fence_after: the same from the
-- counter's value 'cur' (nil: no counter) when the caller has read it, and
-- 'now_s' (optional): now_us as a decimal string.
-- The fence counter holds the last fence issued, alone (semaphores, read-write
-- locks, the scheduler without a job lock, clients before the mutex's record)
-- or followed by the record of the mutex hold that it was issued to:
-- "fence|since_ms|token|owner info". The fence is the part before the first '|'.
local function dlock_fence_of(v)
  return string.match(v, '^([^|]*)|') or v
end

-- The master's epoch (Sentinel and Cluster without WAIT, issue 22 item 5):
-- the client passes, as the script's last key, a record "<term> <floor>"
-- ("<prefix>dlock-epoch", one per server; on a cluster one per hash slot,
-- "<prefix>{<n>}:dlock-epoch" in the slot of the script's keys). <term> is
-- "<run id>/<replication id>": the process, and its term as a master (Redis
-- gives a master a new replication id at every promotion; a replica takes
-- its master's). The run id alone is not enough: a master demoted and
-- promoted again keeps it, and may get its first term's record back by
-- replication from the master in between, whose own writes (a record, an
-- admission) the second failover can lose (third review, finding 1).
-- <floor> is the server clock (us) at the first fence issued or guard
-- checked by this server process in this term: every token it issues is at
-- or above it, and a token issued by an earlier master (before a failover,
-- or before a restart that lost data) is below it, clocks agreeing. A record
-- of another term (a promoted replica still has the old master's), or
-- none (lost with the data, or never made), means this process has not
-- issued a fence yet in this term: the floor is taken then. It is now on a
-- server that was promoted (INFO replication: second_repl_offset is not -1;
-- the time of the promotion is not known, now is after it), and the time
-- the process started on one never promoted, which has served as a master
-- since (a restart, a first use, a slot a reshard moved here, which loses
-- nothing): tokens of an earlier process are below that too, and a lock of
-- another slot (Cluster) that took its fence from this process is not
-- refused. The record never expires.
local DLOCK_EPOCH = KEYS[#KEYS]
if not (DLOCK_EPOCH and string.sub(DLOCK_EPOCH, -11) == 'dlock-epoch') then DLOCK_EPOCH = nil end

-- The floor (a decimal string; nil without a record to keep). 'now' is the
-- clock in us as a string. Its one write (the record) is true whatever the
-- script does next, so it may precede a read that fails. Without the right
-- to call INFO there is no floor to keep: nil, and with 'strict' an error
-- reply as second value (the guard cannot admit then).
local function dlock_epoch_floor(now, strict)
  if not DLOCK_EPOCH then return nil end
  -- One call for both sections (Redis 7); two before Redis 7, which takes one.
  local info = redis.pcall('INFO', 'server', 'replication')
  if type(info) == 'table' then
    info = redis.pcall('INFO', 'server')
    local repl = redis.pcall('INFO', 'replication')
    if type(info) == 'string' and type(repl) == 'string' then info = info .. repl end
  end
  if type(info) == 'table' then
    if not strict then return nil end
    return nil, redis.error_reply('NOPERM the guard needs INFO (server, replication) to tell a change of master (' ..
      tostring(info.err) .. '); grant it: ACL SETUSER <user> +info (see docs/keys.md), or use wait_replicas')
  end
  local id = (string.match(info, 'run_id:(%w+)') or '?') .. '/' .. (string.match(info, 'master_replid:(%w+)') or '?')
  local rec = redis.pcall('GET', DLOCK_EPOCH)
  if type(rec) == 'string' then
    local was, floor = string.match(rec, '^(%S+) (%d+)$')
    if was == id and floor and dlock_fence_ok(floor, FENCE_MAX) then return floor end
  end
  local floor = now
  local up, t_us = string.match(info, 'uptime_in_seconds:(%d+)'), string.match(info, 'server_time_usec:(%d+)')
  if string.match(info, 'second_repl_offset:(%-?%d+)') == '-1' and up and t_us then
    -- uptime is whole seconds (floor(now) - floor(start)): the start is in
    -- the second floor(now) - up. Take that second's end, the upper bound
    -- (never a floor below the start, which would admit a token the earlier
    -- process issued in its last second); capped at now below. This
    -- process's own fences were floored by this record: still admitted.
    local start = dlock_num((math.floor(tonumber(t_us) / 1000000) - tonumber(up) + 1) * 1000000)
    if dlock_fence_lt(start, now) then floor = start end
  end
  redis.call('SET', DLOCK_EPOCH, id .. ' ' .. floor)
  return floor
end

local function dlock_fence_after(fence_key, cur, now_us, now_s)
  local now = now_s or dlock_num(now_us)
  -- Never below this master's floor (its clock stepped back: still above it).
  local floor = dlock_epoch_floor(now)
  if floor and dlock_fence_lt(now, floor) then now = floor end
  if not cur then return now end
  local shown = cur
  cur = dlock_fence_of(cur)
  if not dlock_fence_ok(cur, FENCE_LAST_COUNTER) then
    return nil, redis.error_reply('EFENCE fence counter ' .. fence_key .. ' holds ' .. dlock_shown(shown) ..
      ', not an integer in 0..' .. FENCE_LAST_COUNTER .. ', so no fence above it can be issued. ' ..
      'Set it to the highest fence really issued for this lock, or delete it if none was above the ' ..
      'server clock in microseconds; at ' .. FENCE_MAX .. ' it is used up: take a new lock name. ' ..
      'See docs/errors.md')
  end
  if dlock_fence_lt(cur, now) then return now end
  return dlock_fence_incr(cur)
end

local function dlock_fence_next(fence_key, now_us)
  return dlock_fence_after(fence_key, redis.call('GET', fence_key), now_us)
end

-- The counter's record of a mutex hold: its fence, since when, whose, and
-- the holder's owner info. The counter outlives the hold; the record
-- describes the key's current hold only while that key holds its token.
local function dlock_hold_record(f, since_ms, token, info)
  return f .. '|' .. since_ms .. '|' .. token .. '|' .. info
end

-- The fence, since (server ms) and owner info of the mutex hold 'token' (nil
-- each when unknown): from the counter's record when that hold was the last
-- to be issued a fence, else from the meta hash that clients before the
-- record wrote (docs/keys.md, "Upgrading"). The caller has checked the types.
local function dlock_hold_of(keys, token)
  if not token then return nil end
  local v = redis.call('GET', keys[2])
  if v then
    local f, since, tok, info = string.match(v, '^(%d+)|(%d+)|(%x+)|(.*)$')
    if tok == token then return f, since, info end
  end
  -- pcall: a meta key of another type (not dlock's) is no record either.
  -- A record moved there by dlock_hold_park names its hold's token (an
  -- older client's names none): another hold's is not this one's.
  local m = redis.pcall('HMGET', keys[3], 'fence', 'since', 'info', 'token')
  if m.err or (m[4] and m[4] ~= token) then return nil end
  return m[1] or nil, m[2] or nil, m[3] or nil
end

-- Before the counter is overwritten with a bare fence that was not issued to
-- a mutex hold (a scheduled job's claim with overlap, Redlock's write-back
-- for another token): if the counter holds the record of the hold that the
-- lock key holds now, move that record to {K}:meta with its token, where
-- dlock_hold_of finds it; else status, a forced release and a resent
-- acquire would take a live dlock hold for a foreign one (fence 0). The
-- caller has checked the types of keys[2] and keys[3]. Rare: not on an
-- acquire's or release's path.
local function dlock_hold_park(keys)
  local v = redis.call('GET', keys[2])
  if not v then return end
  local f, since, tok, info = string.match(v, '^(%d+)|(%d+)|(%x+)|(.*)$')
  if tok and redis.pcall('GET', keys[1]) == tok then
    redis.call('HSET', keys[3], 'fence', f, 'since', since, 'info', info, 'token', tok)
    redis.call('PEXPIRE', keys[3], FENCE_TTL_MS)
  end
end

-- Make 'token' the owner for 'lease' ms and record who holds it since when
-- (the counter's record). The fence read comes first: on a key of another
-- type it fails before anything is written. Used by hand-offs, acquire's
-- queued path and the scheduler; an uncontended acquire has its own shorter
-- path (acquire.lua). 'f' (optional): the fence, when the caller has read it
-- already. Returns the fence, or nil and an error reply (nothing written).
local function dlock_take(keys, token, lease, info, now_ms, now_us, f)
  local err
  if not f then
    f, err = dlock_fence_next(keys[2], now_us)
    if not f then return nil, err end
  end
  redis.call('SET', keys[2], dlock_hold_record(f, dlock_num(now_ms), token, info), 'PX', FENCE_TTL_MS)
  redis.call('SET', keys[1], token, 'PX', lease)
  return f
end

-- A wait-queue record ({K}:waiters) of another kind of lock than 'kind':
-- a mutex's "expiry|claim|token|n<nonce>|info", a semaphore's
-- "expiry|p<claim>|token|info", a read-write lock's "expiry|r or w|token|info".
-- A name is one kind at a time, but a waiter of the kind it was may still be
-- queued when it changed (that holder's lease ran out): such a record is
-- neither granted nor dropped here while it is live; its waiter learns the
-- new kind at its next look, which withdraws it. Once its expiry passed (the
-- waiter crashed, or gave up) it is no longer "foreign": it is dropped like
-- a dead record of the own kind. Else the records of a crashed client would
-- stay as long as the queue keys live (each new waiter lengthens them), and
-- 32 of them at the head would stop every hand-off (the grants read 32).
local function dlock_rec_foreign(rec, kind, now_ms)
  if not rec then return false end
  local k = (string.find(rec, '^%d+|p%d+|') and 'semaphore') or (string.find(rec, '^%d+|[rw]|') and 'rwlock')
    or (string.find(rec, '^%d+|%d+|%x+|') and 'mutex')
  if k == nil or k == kind then return false end
  return tonumber(string.match(rec, '^(%d+)|')) > now_ms
end

-- The record of waiter 'id', taken out of the queue, when it is of 'kind'
-- or dead (nil when there is none); nil, and left in place, when another
-- kind's live one.
local function dlock_queue_pop(keys, id, kind, now_ms)
  local rec = redis.call('HGET', keys[5], id)
  if dlock_rec_foreign(rec, kind, now_ms) then return nil end
  redis.call('ZREM', keys[4], id)
  redis.call('HDEL', keys[5], id)
  return rec
end

-- The lock is free: hand it to the first live waiter in arrival order and
-- tell that waiter alone (its client's channel). Waiters whose registration
-- ran out (crashed, gave up) are dropped on the way. Returns true if granted.
-- The head is read once: a ZREM may delete the queue key, and while a cluster
-- slot migrates a script must not touch a key it deleted.
local function dlock_grant_next(keys, now_ms, now_us)
  for _, id in ipairs(redis.call('ZRANGE', keys[4], 0, 31)) do
    local rec = dlock_queue_pop(keys, id, 'mutex', now_ms)
    if rec then
      -- expiry_ms|claim_ms|token|n<nonce>|owner info (before the nonce: without it)
      local exp, claim, token, nonce, info = string.match(rec, '^(%d+)|(%d+)|(%x+)|n(%d+)|(.*)$')
      if not exp then
        exp, claim, token, info = string.match(rec, '^(%d+)|(%d+)|(%x+)|(.*)$')
        nonce = nil
      end
      local cid = string.match(id, '^(%x+):')
      if exp and cid and tonumber(exp) > now_ms then
        local f = dlock_take(keys, token, tonumber(claim), info, now_ms, now_us)
        -- A corrupt fence counter: grant nothing. The waiters learn why
        -- (DLOCK_EFENCE) at their next re-check, which runs acquire.
        if not f then return false end
        -- pcall: without channel rights (ACL) the waiter still gets the lock by its
        -- re-check; the release itself must not fail after its writes.
        -- A waiter id "<client>:s<n>" listens with SSUBSCRIBE (cluster: sharded pub/sub).
        local publish = string.find(id, ':s', 1, true) and 'SPUBLISH' or 'PUBLISH'
        -- "<id> <fence> <nonce>": the nonce names the waiter's acquire call that
        -- wrote the record, so that the waiter can tell this grant from an
        -- older one and take the fence from the message (docs/design.md).
        redis.pcall(publish, '{' .. keys[1] .. '}:w:' .. cid, id .. ' ' .. f .. (nonce and (' ' .. nonce) or ''))
        return true
      end
    end
  end
  return false
end

-- Record one run of a scheduled job (newest first, bounded length).
local function dlock_history(key, node, fence, tick, start, duration, outcome, maxlen)
  redis.call('LPUSH', key, node .. '|' .. fence .. '|' .. tick .. '|' .. start .. '|' .. duration .. '|' .. outcome)
  redis.call('LTRIM', key, 0, tonumber(maxlen) - 1)
  redis.call('PEXPIRE', key, FENCE_TTL_MS)
end

-- The last tick claimed for a job ("tick_ms|node|run token"; older records
-- have no token), as a number, a node and the claiming run's token.
local function dlock_last_tick(key)
  local rec = redis.call('GET', key)
  if not rec then return 0, '', '' end
  local tick, node, token = string.match(rec, '^(%d+)|([^|]*)|?(.*)$')
  return tonumber(tick) or 0, node or '', token or ''
end

-- A job's state (job_set.lua): '1' when a manual trigger is pending.
local function dlock_pending(key)
  return redis.call('HEXISTS', key, 'trigger') == 1 and '1' or '0'
end

-- "skipped: paused by WHO: REASON" when the job is paused, else nil.
local function dlock_paused_why(key)
  local p = redis.call('HMGET', key, 'paused_by', 'paused_reason')
  if not p[1] then return nil end
  if p[2] and p[2] ~= '' then return 'skipped: paused by ' .. p[1] .. ': ' .. p[2] end
  return 'skipped: paused by ' .. p[1]
end

-- The trigger time of the manual run claimed by 'token' ('manual' =
-- "trigger_ms|trigger id|token"), or '' when that token claimed none.
local function dlock_manual_at(key, token)
  local at, _, t = string.match(redis.call('HGET', key, 'manual') or '', '^(%d+)|([^|]*)|(.*)$')
  if t == token then return at end
  return ''
end


-- ---- Read-write locks (rw_*.lua, docs/rwlock.md) ----
-- KEYS as for a mutex: 1 the holders (a ZSET: token -> lease expiry in server ms),
-- 2 the fence counter, 3 meta (a HASH: kind=rwlock, writer=<token>,
-- h:<token> = "side|fence|since_ms|info"), 4 the queue (ZSET: waiter id -> arrival us),
-- 5 the waiters (HASH: waiter id -> "expiry_ms|side|token|info").
-- A mutex keeps a STRING at KEYS[1]; the 'kind' field tells an rwlock's ZSET
-- from another kind's.

-- Refuse (before any write) keys of another kind or type.
local function rw_check(keys)
  local t = redis.call('TYPE', keys[1])['ok']
  if t == 'string' then
    return redis.error_reply('EKIND ' .. keys[1] .. ' is in use as a mutex, not a read-write lock: ' ..
      'the same name cannot be both; pick another name')
  end
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE dlock key ' .. keys[1] .. ' holds a ' .. t .. ', expected a zset')
  end
  local bad = dlock_check_type(keys[2], 'string') or dlock_check_type(keys[3], 'hash')
      or dlock_check_type(keys[4], 'zset') or dlock_check_type(keys[5], 'hash')
  if bad then return bad end
  if t == 'zset' then
    local kind = redis.call('HGET', keys[3], 'kind')
    if kind ~= 'rwlock' then
      return redis.error_reply('EKIND ' .. keys[1] .. ' is in use as a ' .. (kind or 'semaphore') ..
        ', not a read-write lock: the same name cannot be both; pick another name')
    end
  end
  return nil
end

-- Drop holders whose lease ended (score <= now): a crashed holder's share
-- returns here. Returns the live writer's token or nil.
local function rw_prune(keys, now_ms)
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms)) do
    redis.call('ZREM', keys[1], h)
    redis.call('HDEL', keys[3], 'h:' .. h)
  end
  local w = redis.call('HGET', keys[3], 'writer')
  if w and not redis.call('ZSCORE', keys[1], w) then
    redis.call('HDEL', keys[3], 'writer')
    w = nil
  end
  return w
end

-- The live waiters in arrival order, as {id, side}; dead ones are dropped.
local function rw_queue(keys, now_ms)
  local q = {}
  if redis.call('EXISTS', keys[4]) == 0 then return q end
  for _, id in ipairs(redis.call('ZRANGE', keys[4], 0, -1)) do
    local rec = redis.call('HGET', keys[5], id)
    local exp, side
    if rec then exp, side = string.match(rec, '^(%d+)|([rw])|') end
    if exp and tonumber(exp) > now_ms then
      q[#q + 1] = {id, side}
    elseif not exp and dlock_rec_foreign(rec, 'rwlock', now_ms) then
      -- another kind's live waiter: left for it to withdraw
    else
      redis.call('ZREM', keys[4], id)
      redis.call('HDEL', keys[5], id)
    end
  end
  return q
end

-- Keep 'key' alive for at least 'ms' (never shortens it).
local function rw_keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

-- Wake the waiters that may go now (no writer holds): the first waiter if
-- it is a writer and nobody holds, else every reader ahead of the first
-- waiting writer. A message only wakes; the waiter's acquire decides.
local function rw_wake(keys, now_ms, writer)
  if writer then return end
  local holders = redis.call('ZCARD', keys[1])
  for i, e in ipairs(rw_queue(keys, now_ms)) do
    if e[2] == 'w' and (i > 1 or holders > 0) then return end
    local cid = string.match(e[1], '^(%x+):')
    if cid then
      local publish = string.find(e[1], ':s', 1, true) and 'SPUBLISH' or 'PUBLISH'
      redis.pcall(publish, '{' .. keys[1] .. '}:w:' .. cid, e[1] .. ' 0')
    end
    if e[2] == 'w' then return end
  end
end

-- Remove holder 'tok' (known to be one). Deletes meta when nobody holds.
local function rw_drop(keys, tok)
  redis.call('ZREM', keys[1], tok)
  redis.call('HDEL', keys[3], 'h:' .. tok)
  if redis.call('HGET', keys[3], 'writer') == tok then redis.call('HDEL', keys[3], 'writer') end
end

-- ---- Semaphores (sem_*.lua, docs/semaphore.md) ----
-- A semaphore keeps its permits in the lock key itself, a ZSET token -> the
-- permit's expiry (server clock, ms): a permit whose lease ran out no longer
-- counts and is removed by the next script that writes. {K}:meta holds
-- 'kind' ('semaphore'), 'limit' and one field 'p:<token>' per permit
-- ("fence|since_ms|owner info"). Queue, waiters and fence counter are the
-- mutex's. No script deletes the lock key and then touches it again (while a
-- cluster slot migrates, the server would abort the script half-way).

-- Types of a semaphore's keys, and the limit stored with it ('limit' nil:
-- not compared). Reads only; an error reply, or nil.
local function dlock_sem_check(keys, limit)
  local t = redis.call('TYPE', keys[1])['ok']
  if t == 'string' then
    return redis.error_reply('WRONGTYPE dlock lock ' .. keys[1] .. ' is a mutex (or another ' ..
      'application\'s string key), not a semaphore: a name is one kind of lock at a time; take it with ' ..
      'a mutex (dlock run without --limit), or pick another name for the semaphore')
  end
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE dlock key ' .. keys[1] .. ' holds a ' .. t .. ', expected a zset')
  end
  if t == 'zset' then
    -- A read-write lock keeps a ZSET at its name too; its meta says so.
    local kind = redis.call('HGET', keys[3], 'kind')
    if kind and kind ~= 'semaphore' then
      return redis.error_reply('WRONGTYPE dlock lock ' .. keys[1] .. ' is a ' .. kind .. ', not a semaphore: a ' ..
        'name is one kind of lock at a time; pick another name for the semaphore')
    end
  end
  local bad = dlock_check_lock_keys(keys)
  if bad then return bad end
  if limit then
    local have = redis.call('HGET', keys[3], 'limit')
    if have and have ~= limit then
      return redis.error_reply('ELIMIT semaphore ' .. keys[1] .. ' has the limit ' .. have .. ' (stored by ' ..
        'its holders), but this caller asked for ' .. limit .. ' permits: every caller must give the same ' ..
        'limit; change it once no permit is held and nobody waits')
    end
  end
  return nil
end

-- Permits held now (unexpired), and the tokens of the expired ones.
local function dlock_sem_count(keys, now_ms)
  return redis.call('ZCOUNT', keys[1], '(' .. now_ms, '+inf'),
         redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms)
end

-- Give 'token' a permit for 'lease' ms with the next fence. Returns the
-- fence, or nil and an error reply (nothing written).
local function dlock_sem_take(keys, token, lease, info, limit, now_ms, now_us)
  local f, err = dlock_fence_next(keys[2], now_us)
  if not f then return nil, err end
  redis.call('SET', keys[2], f, 'PX', FENCE_TTL_MS)
  redis.call('ZADD', keys[1], now_ms + lease, token)
  redis.call('HSET', keys[3], 'kind', 'semaphore', 'limit', limit,
             'p:' .. token, f .. '|' .. dlock_num(now_ms) .. '|' .. info)
  return f
end

-- Hand up to 'n' free permits to the first live waiters in arrival order,
-- each told alone on its client's channel (as dlock_grant_next does).
-- Returns how many were granted.
local function dlock_sem_grant(keys, n, limit, now_ms, now_us)
  local granted = 0
  if n <= 0 then return 0 end
  for _, id in ipairs(redis.call('ZRANGE', keys[4], 0, 31)) do
    local rec = dlock_queue_pop(keys, id, 'semaphore', now_ms)
    if rec then
      local exp, claim, token, info = string.match(rec, '^(%d+)|p(%d+)|(%x+)|(.*)$')
      local cid = string.match(id, '^(%x+):')
      if exp and cid and tonumber(exp) > now_ms then
        local f = dlock_sem_take(keys, token, tonumber(claim), info, limit, now_ms, now_us)
        if not f then return granted end
        local publish = string.find(id, ':s', 1, true) and 'SPUBLISH' or 'PUBLISH'
        redis.pcall(publish, '{' .. keys[1] .. '}:w:' .. cid, id .. ' ' .. f)
        granted = granted + 1
        if granted >= n then return granted end
      end
    end
  end
  return granted
end

-- Drop the expired permits 'expired' (their fields too), then let the lock
-- and meta keys live as long as the last permit. 'left': permits that remain
-- unexpired; with none the keys go (the lock key by the removals themselves).
local function dlock_sem_tidy(keys, expired, left, now_ms)
  for _, t in ipairs(expired) do redis.call('HDEL', keys[3], 'p:' .. t) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', now_ms) end
  if left <= 0 then
    redis.call('DEL', keys[3])
    return
  end
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', keys[1], last)
  redis.call('PEXPIREAT', keys[3], last)
end

-- Give back the unexpired permit of 'token' (release, withdraw): free
-- permits go to the waiters first. Returns 1, or 0 when the permit was not
-- ours any more (nothing written).
local function dlock_sem_give_back(keys, token, now_ms, now_us)
  local s = redis.call('ZSCORE', keys[1], token)
  if not s or tonumber(s) <= now_ms then return 0 end
  local used, expired = dlock_sem_count(keys, now_ms)
  local limit = redis.call('HGET', keys[3], 'limit')
  local granted = 0
  if redis.call('EXISTS', keys[4]) == 1 then
    local free = limit and (tonumber(limit) - used + 1) or 1
    granted = dlock_sem_grant(keys, free, limit or '1', now_ms, now_us)
  end
  redis.call('ZREM', keys[1], token)
  redis.call('HDEL', keys[3], 'p:' .. token)
  dlock_sem_tidy(keys, expired, used - 1 + granted, now_ms)
  return 1
end

-- sem_info.lua's answer (info.lua gives it too, for a semaphore's name).
local function dlock_sem_info(KEYS, ARGV)
  local bad = dlock_sem_check(KEYS, nil)
  if bad then return bad end
  local now_ms = dlock_now()
  local held = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
  local fence, since, info, pttl, mine = '', '', '', -2, 0
  for i = 1, #held, 2 do
    local left = tonumber(held[i + 1]) - now_ms
    if held[i] == ARGV[1] then mine = 1 end
    if mine == 0 and left > pttl then pttl = left end
    local rec = redis.call('HGET', KEYS[3], 'p:' .. held[i])
    local f, s, o = string.match(rec or '', '^(%d+)|(%d*)|(.*)$')
    if f and (fence == '' or dlock_fence_lt(fence, f)) then fence, since, info = f, s, o end
  end
  if mine == 1 then pttl = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) - now_ms end
  return {#held > 0 and 1 or 0, pttl, fence, since, info, dlock_fence_of(redis.call('GET', KEYS[2]) or ''),
          redis.call('ZCARD', KEYS[4]), mine, #held / 2, redis.call('HGET', KEYS[3], 'limit') or ''}
end

-- rw_info.lua's answer (info.lua gives it too, for a read-write lock's name).
local function dlock_rw_info(KEYS, ARGV)
  local bad = rw_check(KEYS)
  if bad then return bad end
  local now_ms = dlock_now()
  local readers, writer, wfence, wsince, winfo = 0, 0, '', '', ''
  local w = redis.call('HGET', KEYS[3], 'writer')
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
    if h == w then
      writer = 1
      local rec = redis.call('HGET', KEYS[3], 'h:' .. h) or ''
      local f, since, info = string.match(rec, '^w|(%d+)|(%d+)|(.*)$')
      wfence, wsince, winfo = f or '', since or '', info or ''
    else
      readers = readers + 1
    end
  end
  local ww, wr = 0, 0
  if redis.call('EXISTS', KEYS[4]) == 1 then
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      local rec = redis.call('HGET', KEYS[5], id)
      local exp, side
      if rec then exp, side = string.match(rec, '^(%d+)|([rw])|') end
      if exp and tonumber(exp) > now_ms then
        if side == 'w' then ww = ww + 1 else wr = wr + 1 end
      end
    end
  end
  local mine, myttl = 0, -2
  if ARGV[1] ~= '' then
    local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if s and tonumber(s) > now_ms then
      mine = 1
      myttl = tonumber(s) - now_ms
    end
  end
  return {redis.call('EXISTS', KEYS[1]), readers, writer, wfence, wsince, winfo, ww, wr,
          dlock_fence_of(redis.call('GET', KEYS[2]) or ''), redis.call('PTTL', KEYS[1]), mine, myttl}
end

-- dlock_rw_force: admin end of every hold of a read-write lock, whatever
-- its owners; wakes the waiters that may go then. Returns 1 if there were
-- holders, 0 if none. Each live hold leaves a tombstone, field
-- 'deleted:<token>' in the waiters hash {K}:waiters, for as long as its lease
-- had left: the holder's next extend or release finds it and learns
-- "deleted", not "expired" (as force_release.lua does for a mutex); force_release.lua calls it for a
-- read-write lock's name.
-- Not sent twice (a new holder may come between the two sends).
local function dlock_rw_force(KEYS)
  local bad = rw_check(KEYS)
  if bad then return bad end
  local now_ms = dlock_now()
  local held = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local existed = 0
  for i = 1, #held, 2 do
    local left = tonumber(held[i + 1]) - now_ms
    if left > 0 then
      existed = 1
      redis.call('HSET', KEYS[5], 'deleted:' .. held[i], '1')
      rw_keep(KEYS[5], left)
    end
  end
  redis.call('DEL', KEYS[1], KEYS[3])
  rw_wake(KEYS, now_ms, nil)
  return existed
end
