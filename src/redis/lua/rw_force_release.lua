-- rw_force_release.lua: admin end of every hold of a read-write lock, whatever
-- its owners; wakes the waiters that may go then. Returns 1 if there were
-- holders, 0 if none. Each live hold leaves a tombstone, field
-- 'deleted:<token>' in the waiters hash {K}:waiters, for as long as its lease
-- had left: the holder's next extend or release finds it and learns
-- "deleted", not "expired" (as force_release.lua does for a mutex).
-- Not sent twice (a new holder may come between the two sends).
local bad = rw_check(KEYS)
if bad then return bad end
local now_ms = dlock_now()
local held = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local existed = 0
for i = 1, #held, 2 do
  local left = tonumber(held[i + 1]) - now_ms
  if left > 0 then
    existed = 1
    redis.call('HSET', KEYS[5], 'deleted:' .. held[i], '1')
    rw_keep(KEYS[5], left)
  end
end
redis.call('DEL', KEYS[1], KEYS[3])
rw_wake(KEYS, now_ms, nil)
return existed
