-- rl_sched_unclaim.lua: Redlock: take back this node's part of a tick claim
-- that did not reach a majority (topo_redlock.c), so that the tick can be
-- claimed again. Touches only what names our run token. Safe to run twice.
-- KEYS: 1-5 the job lock's keys, 6 last claimed tick.
-- ARGV: 1 run token, 2 '1' for a fixed-delay job, 3 '1' to keep the tick record
--       (the tick is consumed: the previous run held the job lock on a majority).
-- The tick record goes back below the tick we claimed (cron, fixed rate: the
-- earlier ticks stay refused) or away (fixed delay: the next run is due from
-- the last end again). The job lock is given back if it holds our token.
-- Returns 1 when something was ours, else 0.
local bad = dlock_check_lock_keys(KEYS) or dlock_check_type(KEYS[1], 'string') or dlock_check_type(KEYS[6], 'string')
if bad then return bad end
local r = 0
local last, _, owner = dlock_last_tick(KEYS[6])
if owner == ARGV[1] and ARGV[3] ~= '1' then
  if ARGV[2] == '1' or last < 1 then
    redis.call('DEL', KEYS[6])
  else
    redis.call('SET', KEYS[6], dlock_num(last - 1) .. '||', 'PX', FENCE_TTL_MS)
  end
  r = 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local now_ms, now_us = dlock_now()
  if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
  r = 1
end
return r
