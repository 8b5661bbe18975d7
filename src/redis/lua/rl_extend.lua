-- rl_extend.lua: Redlock renewal on one of its nodes: compare-and-pexpire,
-- and re-seed a node that lost the key (restarted empty, FLUSHALL) with our
-- token, only where the key is absent (SET NX): another owner's key is never
-- touched. The quorum decides whether the renewal counts (topo_redlock.c).
-- ARGV: 1 token, 2 lease_ms. Returns 1 extended, 2 re-seeded, -1 another owner.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], FENCE_TTL_MS) -- the hold's record (extend.lua)
  return 1
end
if cur then return -1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 2 end
return -1
