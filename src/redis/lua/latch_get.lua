-- latch_get.lua: a latch's count and expiry. KEYS: 1 the latch hash {K}:latch.
-- Returns {count, ms until it expires}, or -1 when the latch does not exist
-- (never set, or expired).
local bad = dlock_check_type(KEYS[1], 'hash')
if bad then return bad end
local n = redis.call('HGET', KEYS[1], 'count')
if not n then return -1 end
return {tonumber(n), redis.call('PTTL', KEYS[1])}
