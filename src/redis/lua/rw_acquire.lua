-- rw_acquire.lua: take one side of a read-write lock, or (optionally) queue for it.
-- ARGV: 1 token, 2 lease_ms, 3 side ('r' or 'w'), 4 waiter id ('' = try only),
--       5 re-check cap ms, 6 owner info, 7 the token of a hold this thread has on the name ('' none)
-- Returns {1, fence} (a decimal string) when granted, {0, ms until the
-- earliest holder's lease ends (-1 none)} when not, EKIND for a name of
-- another kind. Order (docs/rwlock.md): a writer goes when nobody holds and
-- it is first in the queue; a reader goes when no writer holds and no live
-- writer waits ahead of it; a reader whose thread holds the name already
-- (either side, ARGV 7: a live holder's token) goes at once.
local bad = rw_check(KEYS)
if bad then return bad end
local tok, lease, side, wid, wtok = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[7]
local now_ms, now_us = dlock_now()
local writer = rw_prune(KEYS, now_ms)
local function unqueue()
  if wid ~= '' then
    redis.call('ZREM', KEYS[4], wid)
    redis.call('HDEL', KEYS[5], wid)
  end
end
-- Ours already: a retry after a lost reply. Lengthened, never shortened: this
-- may be a late copy of the acquire that runs after the holder's extend to a
-- longer lease (acquire.lua).
local mine = redis.call('ZSCORE', KEYS[1], tok)
if mine then
  if tonumber(mine) < now_ms + lease then redis.call('ZADD', KEYS[1], 'XX', now_ms + lease, tok) end
  rw_keep(KEYS[1], lease)
  rw_keep(KEYS[3], lease)
  unqueue()
  local rec = redis.call('HGET', KEYS[3], 'h:' .. tok) or ''
  return {1, string.match(rec, '^[rw]|(%d+)|') or '0'}
end
local q = rw_queue(KEYS, now_ms)
local go
if side == 'r' and wtok ~= '' and redis.call('ZSCORE', KEYS[1], wtok) then
  go = true -- a thread that holds the name already: no wait behind its own hold
elseif side == 'w' then
  go = redis.call('EXISTS', KEYS[1]) == 0 and (#q == 0 or q[1][1] == wid)
else
  go = not writer
  if go then
    for _, e in ipairs(q) do
      if e[1] == wid then break end
      if e[2] == 'w' then go = false break end
    end
  end
end
if go then
  local f, err = dlock_fence_next(KEYS[2], now_us)
  if not f then return err end
  redis.call('SET', KEYS[2], f, 'PX', FENCE_TTL_MS)
  redis.call('ZADD', KEYS[1], now_ms + lease, tok)
  redis.call('HSET', KEYS[3], 'kind', 'rwlock', 'h:' .. tok, side .. '|' .. f .. '|' .. dlock_num(now_ms) .. '|' .. ARGV[6])
  if side == 'w' then redis.call('HSET', KEYS[3], 'writer', tok) end
  rw_keep(KEYS[1], lease)
  rw_keep(KEYS[3], lease)
  unqueue()
  dlock_event(KEYS)
  return {1, f}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local left = -1
if first[2] then left = tonumber(first[2]) - now_ms end
if wid ~= '' then
  -- Registered a little past the caller's next re-check, so that a crashed
  -- waiter is dropped from the queue (rw_queue) and does not block it long.
  local wait = tonumber(ARGV[5])
  if left >= 0 and left < wait then wait = left end
  local ttl = wait + 2000
  if redis.call('ZADD', KEYS[4], 'NX', now_us, wid) == 1 then dlock_event(KEYS) end
  redis.call('HSET', KEYS[5], wid, dlock_num(now_ms + ttl) .. '|' .. side .. '|' .. tok .. '|' .. ARGV[6])
  rw_keep(KEYS[4], ttl)
  rw_keep(KEYS[5], ttl)
end
return {0, left}
