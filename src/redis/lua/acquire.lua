-- acquire.lua: take the lock if free; otherwise (optionally) join the wait queue.
-- ARGV: 1 token, 2 lease_ms, 3 waiter id ('' = try only, do not queue),
--       4 re-check cap ms, 5 claim ms (lease of a hand-off), 6 owner info,
--       7 nonce of this call (digits; '' = none): a hand-off's message repeats it.
-- A try (ARGV[3] '') never reads KEYS[4], KEYS[5] or ARGV[7]: the client
-- leaves them out.
-- Returns {1, fence} when the caller owns the lock (the fence as a decimal
-- string: exact to 2^63-1), {0, holder's pttl} when not.
-- The uncontended path (lock free, caller not queued) is kept to the fewest
-- and cheapest calls; each redis.call costs Redis about as much as a whole
-- command. SET NX tests and takes the key in one (it writes nothing when a
-- key of any type is there). SET .. GET writes the clock floor to the counter,
-- with the hold's record (since, token, owner info: what status shows), and
-- reads what it held, in one call (it fails, writing nothing, on a key of
-- another type). The clock's decimal strings are made without string.format,
-- which costs about as much as a redis.call. That path builds no helper: its
-- usual case (a counter whose fence is canonical digits below the clock, or
-- none) is written out here, and everything else (a counter at or above the
-- clock, a corrupt counter, a key of another type) continues below the
-- '-- @cold' line with what was read. What fails after the key was taken is
-- undone before the error is returned, so a failed acquire leaves nothing
-- behind (a corrupt counter is put back, with the counter's usual 30-day
-- expiry). The meta key {K}:meta is neither read nor written here (semaphores
-- and read-write locks use it). Servers before Redis 7 (no REDIS_VERSION_NUM;
-- SET .. GET came in 6.2) take the general path below, and so do calls that
-- keep the master's epoch record (Sentinel and Cluster without WAIT: the
-- fence must not be below its floor, prelude.lua's dlock_epoch_floor).
local wid = ARGV[3]
local t = redis.call('TIME')
local s, us = t[1], t[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
local ms_s, us_s = s .. string.sub(us, 1, 3), s .. us
local taken = redis.REDIS_VERSION_NUM and not DLOCK_EPOCH and (wid == '' or redis.call('EXISTS', KEYS[4], KEYS[5]) == 0)
    and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local last
if taken then
  redis.pcall('SPUBLISH', '{' .. KEYS[1] .. '}:ev', 'ev') -- dlock_event, inline on this path
  -- The record as dlock_hold_record (prelude) writes it.
  last = redis.pcall('SET', KEYS[2], us_s .. '|' .. ms_s .. '|' .. ARGV[1] .. '|' .. ARGV[6], 'PX', FENCE_TTL_MS, 'GET')
  if not last then return {1, us_s} end
  if type(last) == 'string' then
    local lf = string.match(last, '^([1-9]%d*)|') or (string.find(last, '^[1-9]%d*$') and last)
    if lf and (#lf < #us_s or (#lf == #us_s and lf < us_s)) then return {1, us_s} end
  end
end
-- @cold
local token, lease = ARGV[1], tonumber(ARGV[2])
local now_ms, now_us = tonumber(s) * 1000 + math.floor(tonumber(us) / 1000), tonumber(s) * 1000000 + tonumber(us)
if taken then
  -- The uncontended path's other cases, with the key taken and the counter
  -- read (and already set to the clock floor with this hold's record).
  if type(last) == 'table' then
    redis.call('DEL', KEYS[1])
    return dlock_check_type(KEYS[2], 'string') or last
  end
  local f, err = dlock_fence_after(KEYS[2], last, now_us, us_s)
  -- A counter at or above the clock, or a corrupt one: one more call.
  if not f then
    redis.call('SET', KEYS[2], last, 'PX', FENCE_TTL_MS)
    redis.call('DEL', KEYS[1])
    return err
  end
  redis.call('SET', KEYS[2], dlock_hold_record(f, ms_s, token, ARGV[6]), 'PX', FENCE_TTL_MS)
  return {1, f}
end
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  -- Not a string: a semaphore's permits (sem_acquire.lua), or another key.
  if redis.pcall('HGET', KEYS[3], 'kind') == 'semaphore' then
    return redis.error_reply('WRONGTYPE dlock lock ' .. KEYS[1] .. ' is a semaphore, not a mutex: a name ' ..
      'is one kind of lock at a time; take a permit of the semaphore (dlock run --limit N), or ' ..
      'pick another name for the mutex')
  end
  return cur
end
local in_queue = wid ~= '' and redis.call('EXISTS', KEYS[4], KEYS[5]) > 0
if in_queue or (wid ~= '' and cur and cur ~= token) then
  -- The queue will be written: check its types before any write.
  local bad = dlock_check_type(KEYS[4], 'zset') or dlock_check_type(KEYS[5], 'hash')
  if bad then return bad end
end
if cur == token then
  -- Ours already: a hand-off not yet confirmed, or a retry after a lost reply.
  -- The lease is lengthened, never shortened: this may be a late copy of the
  -- acquire that runs after the holder's extend to a longer lease, whose
  -- deadline the holder counts on (the model in docs/model.md found it).
  local f = dlock_hold_of(KEYS, token)
  if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  if in_queue then
    redis.call('ZREM', KEYS[4], wid)
    redis.call('HDEL', KEYS[5], wid)
  end
  return {1, f or '0'}
end
if not cur then
  local f, err = dlock_take(KEYS, token, lease, ARGV[6], now_ms, now_us)
  if not f then return err end
  dlock_event(KEYS)
  if in_queue then
    redis.call('ZREM', KEYS[4], wid)
    redis.call('HDEL', KEYS[5], wid)
  end
  return {1, f}
end
local pttl = redis.call('PTTL', KEYS[1])
-- Every key dlock sets has a lease and a record (dlock_hold_of): a key without
-- either is an application's (or was PERSISTed); waiting for it would never end.
if pttl == -1 and not dlock_hold_of(KEYS, cur) then
  return redis.error_reply('EFOREIGN key ' .. KEYS[1] .. ' exists without an expiry and without dlock ' ..
    'metadata: it is not a dlock lock (an application key?), so it would never be released')
end
if wid ~= '' then
  -- Stay registered a little past the caller's next re-check, so that a
  -- crashed waiter is skipped by the next hand-off.
  local wait = tonumber(ARGV[4])
  if pttl > 0 and pttl < wait then wait = pttl end
  local ttl = wait + 2000
  if redis.call('ZADD', KEYS[4], 'NX', now_us, wid) == 1 then dlock_event(KEYS) end
  local nonce = ARGV[7] and ARGV[7] ~= '' and ('n' .. ARGV[7] .. '|') or ''
  redis.call('HSET', KEYS[5], wid, dlock_num(now_ms + ttl) .. '|' .. ARGV[5] .. '|' .. token .. '|' .. nonce .. ARGV[6])
  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
  if redis.call('PTTL', KEYS[5]) < ttl then redis.call('PEXPIRE', KEYS[5], ttl) end
end
return {0, pttl}
