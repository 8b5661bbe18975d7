-- extend.lua: compare-and-pexpire. Never re-creates an expired key.
-- ARGV: 1 token, 2 lease_ms. Returns 1 extended, 0 no such key, -1 another owner,
-- -2 our hold was deleted by a forced release (its tombstone, see force_release.lua).
-- pcall: another kind's ZSET at the name is another owner's (-1), not an error.
local cur = redis.pcall('GET', KEYS[1])
if cur ~= ARGV[1] then
  -- Not the hot path: only a hold already lost looks for the tombstone.
  if redis.pcall('HGET', KEYS[5], 'deleted') == ARGV[1] then return -2 end
  if cur then return -1 end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- The counter holds the hold's record: it lives at least as long as the hold
-- (30 days from the last acquire or renewal), however long renewals keep it.
redis.call('PEXPIRE', KEYS[2], FENCE_TTL_MS)
return 1
