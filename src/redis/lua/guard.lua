-- guard.lua: admit a write carrying fencing token ARGV[1] only if no higher
-- token was seen for this resource; record it. Tokens are decimal strings
-- without leading zeros, compared by length then digits (exact for 64 bits).
-- A token or recorded value that is no integer in 0..2^63-1 is an error: a
-- wrapped or corrupt value must not admit anyone.
-- Where a failover may lose admissions (Sentinel and Cluster without WAIT),
-- the master's epoch record (prelude.lua, dlock_epoch_floor) gives a floor:
-- no token below it is admitted, since admissions made on an earlier master
-- may have been lost with it. Without the right to call INFO the check fails
-- (NOPERM): unsure, no admission.
-- Returns {1, previous} when admitted, {0, highest} when stale, {0, floor, 1}
-- when stale under the floor.
local bad = dlock_check_type(KEYS[1], 'string')
if bad then return bad end
local cur = redis.call('GET', KEYS[1])
local t = ARGV[1]
if not dlock_fence_ok(t, FENCE_MAX) then
  return redis.error_reply('EFENCE token ' .. dlock_shown(t) .. ' is not a fencing token (an integer in 1..' ..
    FENCE_MAX .. ')')
end
if cur and not dlock_fence_ok(cur, FENCE_MAX) then
  return redis.error_reply('EFENCE guard key ' .. KEYS[1] .. ' holds ' .. dlock_shown(cur) ..
    ', not a fencing token (an integer in 0..' .. FENCE_MAX .. '), so no token can be compared with it. ' ..
    'Set it to the highest token really admitted for this resource, or delete it; see docs/errors.md')
end
local _, now_us = dlock_now()
local floor, err = dlock_epoch_floor(dlock_num(now_us), true)
if err then return err end
if cur and dlock_fence_lt(t, cur) and not (floor and dlock_fence_lt(cur, floor)) then return {0, cur} end
if floor and dlock_fence_lt(t, floor) then return {0, floor, 1} end
redis.call('SET', KEYS[1], t)
return {1, cur or ''}
