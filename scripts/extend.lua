-- extend.lua: compare-and-pexpire. Never re-creates an expired key.
-- ARGV: 1 token, 2 lease_ms. Returns 1 extended, 0 no such key, -1 another owner.
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur then return -1 end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return 1
