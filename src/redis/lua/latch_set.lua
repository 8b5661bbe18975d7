-- latch_set.lua: start a countdown latch. KEYS: 1 the latch hash {K}:latch.
-- ARGV: 1 count (>= 1), 2 expiry in ms, 3 the setter's token (random per call).
-- Returns {1, count} set (also when this token set it already: a resent call),
-- or {0, count left} while the latch is counting for another setter.
local bad = dlock_check_type(KEYS[1], 'hash')
if bad then return bad end
local cur = redis.call('HMGET', KEYS[1], 'count', 'token')
if cur[1] and tonumber(cur[1]) > 0 then
  if cur[2] == ARGV[3] then return {1, tonumber(cur[1])} end
  return {0, tonumber(cur[1])}
end
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'token', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, tonumber(ARGV[1])}
