-- rw_withdraw.lua: a waiter gives up (deadline, cancel, error), or an
-- acquire whose outcome is unknown is undone: leave the queue, end a hold
-- of 'token' if there is one, and wake who may go now.
-- ARGV: 1 waiter id ('' none), 2 token. Returns 1 if a hold was ended, else 0.
local bad = rw_check(KEYS)
if bad then return bad end
local now_ms = dlock_now()
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
end
local ended = 0
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  rw_drop(KEYS, ARGV[2])
  ended = 1
end
local writer = rw_prune(KEYS, now_ms)
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
rw_wake(KEYS, now_ms, writer)
dlock_event(KEYS)
return ended
