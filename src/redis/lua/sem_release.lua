-- sem_release.lua: give back our permit; free permits go to the first
-- waiters (dlock_sem_give_back). ARGV: 1 token. Returns 1 released, 0 our
-- permit was gone or its lease had run out (nothing is written then: a late
-- release touches no other holder's permit).
local bad = dlock_sem_check(KEYS, nil)
if bad then
  -- The name is another kind's now (its permits ended): our permit is not
  -- there either, which is the answer (0) of a late release.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
  return bad
end
local now_ms, now_us = dlock_now()
local r = dlock_sem_give_back(KEYS, ARGV[1], now_ms, now_us)
dlock_event(KEYS)
return r
