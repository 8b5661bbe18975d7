-- rw_release.lua: end one hold of a read-write lock and wake who may go now.
-- ARGV: 1 token. Returns 1 released, 0 not held (gone, or its lease had
-- ended), -2 deleted by a forced release (its tombstone, see dlock_rw_force in prelude.lua).
local bad = rw_check(KEYS)
if bad then
  -- The name is another kind's now (its holds ended): our hold is not
  -- there either, which is the answer (0) for a hold that is gone.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
  return bad
end
local tok = ARGV[1]
local now_ms = dlock_now()
local s = redis.call('ZSCORE', KEYS[1], tok)
if not s or tonumber(s) <= now_ms then
  if redis.call('HEXISTS', KEYS[5], 'deleted:' .. tok) == 1 then return -2 end
  rw_wake(KEYS, now_ms, rw_prune(KEYS, now_ms))
  return 0
end
rw_drop(KEYS, tok)
local writer = rw_prune(KEYS, now_ms)
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
rw_wake(KEYS, now_ms, writer)
dlock_event(KEYS)
return 1
