-- sem_withdraw.lua: a waiter gives up (deadline, cancel, error). If a permit
-- was handed to it meanwhile, pass it on instead of keeping it.
-- ARGV: 1 waiter id, 2 token. Returns 1 if a permit of ours was given back, else 0.
local bad = dlock_sem_check(KEYS, nil)
if bad then return bad end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
dlock_event(KEYS)
local now_ms, now_us = dlock_now()
return dlock_sem_give_back(KEYS, ARGV[2], now_ms, now_us)
