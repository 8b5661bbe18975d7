-- job_set.lua: operate a scheduled job (dlock job pause/resume/trigger).
-- KEYS: 1 the job's state (a HASH {K}:job: paused_by, paused_reason,
--       paused_at, trigger = "at_ms|by|id", manual = "at_ms|id|token" of the
--       last claimed trigger).
-- ARGV: 1 'pause', 'resume' or 'trigger', 2 by, 3 reason, 4 id (trigger: fresh
--       per call), 5 the job's channel, 6 'SPUBLISH' (cluster) or 'PUBLISH'.
-- Returns 1 when it changed the state, 0 when there was nothing to do (already
-- paused, not paused, a trigger already pending). A change is published on
-- the job's channel ("job"), which wakes the running schedulers.
-- Safe to run twice: a second pause or resume changes nothing more, and a
-- trigger whose id is already pending or claimed answers 1 again.
local bad = dlock_check_type(KEYS[1], 'hash')
if bad then return bad end
local now_ms = dlock_now()
local changed = 0
if ARGV[1] == 'pause' then
  if redis.call('HEXISTS', KEYS[1], 'paused_by') == 0 then
    redis.call('HSET', KEYS[1], 'paused_by', ARGV[2], 'paused_reason', ARGV[3], 'paused_at', dlock_num(now_ms))
    changed = 1
  end
elseif ARGV[1] == 'resume' then
  changed = redis.call('HDEL', KEYS[1], 'paused_by', 'paused_reason', 'paused_at') > 0 and 1 or 0
elseif ARGV[1] == 'trigger' then
  local trig = redis.call('HGET', KEYS[1], 'trigger')
  local claimed = string.match(redis.call('HGET', KEYS[1], 'manual') or '', '^%d+|([^|]*)|')
  if claimed == ARGV[4] then return 1 end -- a second send: the first one's trigger ran already
  if not trig then
    redis.call('HSET', KEYS[1], 'trigger', dlock_num(now_ms) .. '|' .. ARGV[2] .. '|' .. ARGV[4])
    changed = 1
  elseif string.match(trig, '|([^|]*)$') == ARGV[4] then
    return 1
  end
else
  return redis.error_reply('ERR dlock: unknown job operation ' .. ARGV[1])
end
-- A paused job keeps its state until resumed; otherwise it ages out with
-- the job's other keys.
if redis.call('HEXISTS', KEYS[1], 'paused_by') == 1 then
  redis.call('PERSIST', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], FENCE_TTL_MS)
end
if changed == 1 then redis.pcall(ARGV[6], ARGV[5], 'job') end
return changed
