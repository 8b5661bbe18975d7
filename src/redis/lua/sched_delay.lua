-- sched_delay.lua: claim the next run of a fixed-delay job, due 'delay' after the
-- previous run ended on any node (server clock, so node clocks do not matter).
-- KEYS: 1-5 the job lock's keys, 6 last claimed tick, 7 history, 8 last end,
--       9 the job's state (job_set.lua).
-- ARGV: 1 delay_ms, 2 token, 3 lock_at_most_for_ms, 4 node, 5 history length.
-- Returns {1, fence, start_ms, tick_ms}, {0, 'running', holder}, {0, 'wait', ms}
-- or {0, 'paused', why}: a paused job's due run is recorded as skipped and the
-- next one is due a delay later.
-- Safe to run twice: a second run of the same claim (its reply was lost) finds
-- the job lock held by its own token and gets the first one's answer.
local bad = dlock_check_lock_keys(KEYS) or dlock_check_type(KEYS[1], 'string')
    or dlock_check_type(KEYS[6], 'string') or dlock_check_type(KEYS[8], 'string')
    or dlock_check_type(KEYS[9], 'hash')
if bad then return bad end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[2] then
  local f, since = dlock_hold_of(KEYS, cur)
  return {1, f or '0', since or '0', dlock_num(dlock_last_tick(KEYS[6]))}
end
if cur then
  return {0, 'running', select(3, dlock_hold_of(KEYS, cur)) or '?'}
end
local now_ms, now_us = dlock_now()
local last = dlock_last_tick(KEYS[6])
local lastend = tonumber(redis.call('GET', KEYS[8]) or '0') or 0
if last > lastend then
  -- The last run was claimed but never finished, and its lock is gone: its
  -- runner died. Count its end as now.
  lastend = now_ms
  redis.call('SET', KEYS[8], dlock_num(lastend), 'PX', FENCE_TTL_MS)
end
local due = now_ms
if lastend > 0 then due = lastend + tonumber(ARGV[1]) end
if now_ms < due then return {0, 'wait', dlock_num(due - now_ms)} end
if due <= last then due = last + 1 end
local why = dlock_paused_why(KEYS[9])
if why then
  redis.call('SET', KEYS[6], dlock_num(due) .. '|' .. ARGV[4] .. '|' .. ARGV[2] .. '|paused', 'PX', FENCE_TTL_MS)
  redis.call('SET', KEYS[8], dlock_num(now_ms), 'PX', FENCE_TTL_MS)
  dlock_history(KEYS[7], ARGV[4], '0', dlock_num(due), dlock_num(now_ms), '-1', string.sub(why, 1, 63), ARGV[5])
  return {0, 'paused', why}
end
local f, err = dlock_fence_next(KEYS[2], now_us)
if not f then return err end
redis.call('SET', KEYS[6], dlock_num(due) .. '|' .. ARGV[4] .. '|' .. ARGV[2], 'PX', FENCE_TTL_MS)
dlock_take(KEYS, ARGV[2], tonumber(ARGV[3]), ARGV[4], now_ms, now_us, f)
return {1, f, dlock_num(now_ms), dlock_num(due)}
