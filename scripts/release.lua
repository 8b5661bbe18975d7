-- release.lua: compare-and-delete, then hand the lock to the next waiter.
-- ARGV: 1 token. Returns 1 released, 0 no such key, -1 held by another owner.
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur then return -1 end
  return 0
end
local bad = dlock_check_lock_keys(KEYS)
if bad then return bad end
redis.call('DEL', KEYS[1], KEYS[3])
local now_ms, now_us = dlock_now()
dlock_grant_next(KEYS, now_ms, now_us)
return 1
