-- prelude.lua: helpers shared by the dlock scripts; prepended to each at build time.
-- Lock scripts get KEYS: 1 lock, 2 fence, 3 meta, 4 queue, 5 waiters (see docs/keys.md).
-- Every read that can fail (WRONGTYPE) runs before the first write: Redis does not roll
-- a script back when it stops half-way.

local FENCE_TTL_MS = 2592000000 -- 30 days, the longest lease dlock accepts

local function dlock_now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function dlock_num(n)
  return string.format('%.0f', n)
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

-- The next fencing token: above the last one issued for this lock, and never
-- below the server clock in microseconds, so that tokens keep rising even
-- after the counter was lost (restart without persistence, FLUSHALL).
local function dlock_next_fence(fence_key, now_us)
  local f = (tonumber(redis.call('GET', fence_key) or '0') or 0) + 1
  if now_us > f then f = now_us end
  redis.call('SET', fence_key, dlock_num(f), 'PX', FENCE_TTL_MS)
  return f
end

-- Make 'token' the owner for 'lease' ms and record who holds it since when.
-- The fence read and the HSET come first: on a key of another type each fails
-- before anything is written. This is the hot path: no call here is spare.
local function dlock_take(keys, token, lease, info, now_ms, now_us)
  local f = (tonumber(redis.call('GET', keys[2]) or '0') or 0) + 1
  if now_us > f then f = now_us end
  redis.call('HSET', keys[3], 'fence', dlock_num(f), 'since', dlock_num(now_ms), 'info', info)
  redis.call('SET', keys[2], dlock_num(f), 'PX', FENCE_TTL_MS)
  redis.call('SET', keys[1], token, 'PX', lease)
  redis.call('PEXPIRE', keys[3], lease)
  return f
end

-- The lock is free: hand it to the first live waiter in arrival order and
-- tell that waiter alone (its client's channel). Waiters whose registration
-- ran out (crashed, gave up) are dropped on the way. Returns true if granted.
-- The head is read once: a ZREM may delete the queue key, and while a cluster
-- slot migrates a script must not touch a key it deleted.
local function dlock_grant_next(keys, now_ms, now_us)
  for _, id in ipairs(redis.call('ZRANGE', keys[4], 0, 31)) do
    redis.call('ZREM', keys[4], id)
    local rec = redis.call('HGET', keys[5], id)
    redis.call('HDEL', keys[5], id)
    if rec then
      -- expiry_ms|claim_ms|token|owner info
      local exp, claim, token, info = string.match(rec, '^(%d+)|(%d+)|(%x+)|(.*)$')
      local cid = string.match(id, '^(%x+):')
      if exp and cid and tonumber(exp) > now_ms then
        local f = dlock_take(keys, token, tonumber(claim), info, now_ms, now_us)
        -- pcall: without channel rights (ACL) the waiter still gets the lock by its
        -- re-check; the release itself must not fail after its writes.
        -- A waiter id "<client>:s<n>" listens with SSUBSCRIBE (cluster: sharded pub/sub).
        redis.pcall(string.find(id, ':s', 1, true) and 'SPUBLISH' or 'PUBLISH', '{' .. keys[1] .. '}:w:' .. cid, id .. ' ' .. dlock_num(f))
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

-- The last tick claimed for a job ("tick_ms|node"), as a number and a node.
local function dlock_last_tick(key)
  local rec = redis.call('GET', key)
  if not rec then return 0, '' end
  local tick, node = string.match(rec, '^(%d+)|(.*)$')
  return tonumber(tick) or 0, node or ''
end

