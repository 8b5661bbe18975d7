-- withdraw.lua: a waiter gives up (deadline, cancel, error). If the lock was
-- handed to it meanwhile, pass it on to the next waiter instead of keeping it.
-- ARGV: 1 waiter id, 2 token. Returns 1 if a hand-off to us was undone, else 0.
local bad = dlock_check_lock_keys(KEYS)
if bad then return bad end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
dlock_event(KEYS)
if redis.call('GET', KEYS[1]) == ARGV[2] then
  local now_ms, now_us = dlock_now()
  if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
  return 1
end
return 0
