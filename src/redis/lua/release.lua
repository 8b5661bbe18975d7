-- release.lua: compare-and-delete, then hand the lock to the next waiter.
-- ARGV: 1 token. Returns 1 released, 0 no such key, -1 held by another owner,
-- -2 our hold was deleted by a forced release (its tombstone, see force_release.lua).
-- The hold's record is in the fence counter, which outlives the hold: only
-- the key is deleted (not {K}:meta, which a mutex does not write); the queue
-- is looked at only if it exists.
-- pcall: a name that is another kind's now (a semaphore's or read-write
-- lock's ZSET) is not ours either: -1, another owner, not a WRONGTYPE error.
local cur = redis.pcall('GET', KEYS[1])
if cur ~= ARGV[1] then
  -- Not the hot path: only a hold already lost looks for the tombstone.
  if redis.pcall('HGET', KEYS[5], 'deleted') == ARGV[1] then return -2 end
  if cur then return -1 end
  return 0
end
-- A hand-off overwrites the key; it is deleted only when nobody takes over
-- (while a cluster slot migrates, a script must not touch a key it deleted:
-- the server aborts it half-way).
if redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('DEL', KEYS[1])
  -- dlock_event, inline on this path
  if redis.REDIS_VERSION_NUM then redis.pcall('SPUBLISH', '{' .. KEYS[1] .. '}:ev', 'ev') end
  return 1
end
-- @cold
local now_ms, now_us = dlock_now()
if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1]) end
dlock_event(KEYS)
return 1
