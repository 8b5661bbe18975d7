-- latch_down.lua: count a latch down by one, never below zero; at zero, wake
-- the waiters. KEYS: 1 the latch hash {K}:latch. ARGV: 1 the latch's channel,
-- 2 'SPUBLISH' on a cluster (sharded pub/sub), else 'PUBLISH'.
-- Returns the count after it, or -1 when the latch does not exist. At zero the
-- hash stays until its expiry, so that later waiters find it open.
local bad = dlock_check_type(KEYS[1], 'hash')
if bad then return bad end
local n = redis.call('HGET', KEYS[1], 'count')
if not n then return -1 end
n = tonumber(n)
if n > 0 then
  n = redis.call('HINCRBY', KEYS[1], 'count', -1)
  if n == 0 then redis.pcall(ARGV[2], ARGV[1], 'latch') end
end
return n
