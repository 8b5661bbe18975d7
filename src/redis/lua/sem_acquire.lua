-- sem_acquire.lua: take one of a semaphore's permits if one is free;
-- otherwise (optionally) join the wait queue (the mutex's, acquire.lua).
-- ARGV: 1 token, 2 lease_ms, 3 waiter id ('' = try only, do not queue),
--       4 re-check cap ms, 5 claim ms (lease of a hand-off), 6 owner info,
--       7 limit (the caller's permit count, a decimal string)
-- Returns {1, fence} when the caller holds a permit (the fence as a decimal
-- string), {0, ms until the next permit's lease ends} when not.
-- Free permits go to queued waiters first, in arrival order, so a caller
-- that arrives while others wait does not jump the queue (it may be one of
-- them: a hand-off to it is confirmed here).
local token, lease, wid, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[7]
local bad = dlock_sem_check(KEYS, limit)
if bad then return bad end
local now_ms, now_us = dlock_now()
local used, expired = dlock_sem_count(KEYS, now_ms)
local queued = redis.call('EXISTS', KEYS[4]) == 1
local function dequeue()
  if wid ~= '' and queued then
    redis.call('ZREM', KEYS[4], wid)
    redis.call('HDEL', KEYS[5], wid)
  end
end
local mine = redis.call('ZSCORE', KEYS[1], token)
if mine and tonumber(mine) > now_ms then
  -- Ours already: a hand-off not yet confirmed, or a retry after a lost reply.
  -- Lengthened, never shortened: this may be a late copy of the acquire that
  -- runs after the holder's extend to a longer lease (acquire.lua).
  if tonumber(mine) < now_ms + lease then redis.call('ZADD', KEYS[1], 'XX', now_ms + lease, token) end
  local rec = redis.call('HGET', KEYS[3], 'p:' .. token) or ''
  dequeue()
  dlock_sem_tidy(KEYS, expired, used, now_ms)
  return {1, string.match(rec, '^(%d+)|') or '0'}
end
local n = tonumber(limit)
local free = n - used
-- Permits handed to waiters here: their keys' expiry must cover them.
local granted = 0
if free > 0 and queued then
  granted = dlock_sem_grant(KEYS, free, limit, now_ms, now_us)
  if granted > 0 then dlock_event(KEYS) end
  used = used + granted
  free = free - granted
  mine = redis.call('ZSCORE', KEYS[1], token)
  if mine and tonumber(mine) > now_ms then
    -- Granted to us just now (we were the first live waiter).
    redis.call('ZADD', KEYS[1], 'XX', now_ms + lease, token)
    local rec = redis.call('HGET', KEYS[3], 'p:' .. token) or ''
    dequeue()
    dlock_sem_tidy(KEYS, expired, used, now_ms)
    return {1, string.match(rec, '^(%d+)|') or '0'}
  end
end
if free > 0 then
  local f, err = dlock_sem_take(KEYS, token, lease, ARGV[6], limit, now_ms, now_us)
  if not f then return err end
  dlock_event(KEYS)
  dequeue()
  dlock_sem_tidy(KEYS, expired, used + 1, now_ms)
  return {1, f}
end
-- All permits held: when does the first one end?
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
local wait = first and (tonumber(first) - now_ms) or 0
if wid ~= '' then
  -- Stay registered a little past the caller's next re-check, so that a
  -- crashed waiter is skipped by the next hand-off.
  local cap = tonumber(ARGV[4])
  if wait > 0 and wait < cap then cap = wait end
  local ttl = cap + 2000
  if redis.call('ZADD', KEYS[4], 'NX', now_us, wid) == 1 then dlock_event(KEYS) end
  redis.call('HSET', KEYS[5], wid, dlock_num(now_ms + ttl) .. '|p' .. ARGV[5] .. '|' .. token .. '|' .. ARGV[6])
  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
  if redis.call('PTTL', KEYS[5]) < ttl then redis.call('PEXPIRE', KEYS[5], ttl) end
end
-- A grant just made (to waiters ahead of us) created or lengthened permits:
-- without this the keys would keep no expiry, or one shorter than theirs.
if #expired > 0 or granted > 0 then dlock_sem_tidy(KEYS, expired, used, now_ms) end
return {0, wait}
