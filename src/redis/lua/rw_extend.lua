-- rw_extend.lua: set the lease of one hold of a read-write lock. Never
-- revives a hold whose lease ended (score <= now), even if not yet pruned.
-- ARGV: 1 token, 2 lease_ms. Returns 1 extended, 0 not held, -2 deleted by a
-- forced release (force_release.lua, dlock_rw_force; the codes of extend.lua).
local bad = rw_check(KEYS)
if bad then
  -- The name is another kind's now (its holds ended): our hold is not
  -- there either, which is the answer (0) for a hold that is gone.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
  return bad
end
local tok, lease = ARGV[1], tonumber(ARGV[2])
local now_ms = dlock_now()
local s = redis.call('ZSCORE', KEYS[1], tok)
if not s or tonumber(s) <= now_ms then
  if redis.call('HEXISTS', KEYS[5], 'deleted:' .. tok) == 1 then return -2 end
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now_ms + lease, tok)
rw_keep(KEYS[1], lease)
rw_keep(KEYS[3], lease)
return 1
