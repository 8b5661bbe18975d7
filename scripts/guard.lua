-- guard.lua: admit a write carrying fencing token ARGV[1] only if no higher
-- token was seen for this resource; record it. Tokens are decimal strings
-- without leading zeros, compared by length then digits (exact for 64 bits).
-- Returns {1, previous} when admitted, {0, highest} when stale.
local bad = dlock_check_type(KEYS[1], 'string')
if bad then return bad end
local cur = redis.call('GET', KEYS[1])
local t = ARGV[1]
if cur and (#t < #cur or (#t == #cur and t < cur)) then return {0, cur} end
redis.call('SET', KEYS[1], t)
return {1, cur or ''}
