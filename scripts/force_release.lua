-- force_release.lua: admin delete of a lock whatever its owner; wakes the next waiter.
-- Returns 1 if a lock key was deleted, 0 if there was none.
local bad = dlock_check_type(KEYS[1], 'string') or dlock_check_lock_keys(KEYS)
if bad then return bad end
local existed = redis.call('EXISTS', KEYS[1])
local now_ms, now_us = dlock_now()
if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
return existed
