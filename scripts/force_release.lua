-- force_release.lua: admin delete of a lock whatever its owner; wakes the next waiter.
-- ARGV: 1 '1' to delete a key without dlock metadata too (another library's lock).
-- Returns 1 if a lock key was deleted, 0 if there was none, -1 (nothing done)
-- when the key has no dlock metadata and ARGV[1] is not '1'.
local bad = dlock_check_type(KEYS[1], 'string') or dlock_check_lock_keys(KEYS)
if bad then return bad end
-- Every hold dlock takes writes {K}:meta with the key and gives it the same
-- lease: a key without it was set by someone else, maybe an application's data.
if ARGV[1] ~= '1' and redis.call('GET', KEYS[1]) and not redis.call('HGET', KEYS[3], 'fence') then
  return -1
end
-- A hand-off overwrites the lock and meta keys; they are deleted only when
-- nobody takes over (while a cluster slot migrates, a script must not touch a
-- key it deleted).
local existed = redis.call('EXISTS', KEYS[1])
local now_ms, now_us = dlock_now()
if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
return existed
