-- latch_set.lua: start a countdown latch. KEYS: 1 the latch hash {K}:latch.
-- ARGV: 1 count (>= 1), 2 expiry in ms, 3 the setter's token (random per call).
-- Returns {1, count} set (also when this token set it already: a resent call,
-- answered with the count as it is now),
-- or {0, count left} while the latch is counting for another setter.
local bad = dlock_check_type(KEYS[1], 'hash')
if bad then return bad end
local cur = redis.call('HMGET', KEYS[1], 'count', 'token')
-- Our own token: a resent call (its first run's reply was lost). The latch
-- stays as it is, also when it was counted down to zero meanwhile: setting
-- it again would close a latch that opened.
if cur[1] and cur[2] == ARGV[3] then return {1, tonumber(cur[1])} end
if cur[1] and tonumber(cur[1]) > 0 then return {0, tonumber(cur[1])} end
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'token', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, tonumber(ARGV[1])}
