-- sched_finish.lua: record a run's end; release the job lock, or keep it until
-- lock_at_least_for has passed since the start.
-- KEYS: 1-5 the job lock's keys, 6 last claimed tick, 7 history, 8 last end.
-- ARGV: 1 token, 2 tick_ms, 3 start_ms, 4 lock_at_least_for_ms, 5 node, 6 fence,
--       7 outcome, 8 history length, 9 overlap ('1': no job lock was taken).
--       10 lock_at_most_for_ms, 11 '1' when this is a second send (the first one's reply was lost).
-- Returns {duration_ms, 1 if the job lock was still ours}.
-- A second send looks for the first one's history entry: if it is there the
-- first ran (atomically), so nothing is written again and its answer is
-- rebuilt: the lock was ours if it still is, or if the run ended before its
-- lock_at_most_for lease could have run out (server clock).
if ARGV[11] == '1' then
  local bad = dlock_check_type(KEYS[7], 'list')
  if bad then return bad end
  local head = ARGV[5] .. '|' .. ARGV[6] .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|'
  for _, e in ipairs(redis.call('LRANGE', KEYS[7], 0, tonumber(ARGV[8]) - 1)) do
    if string.sub(e, 1, #head) == head then
      local d = string.match(string.sub(e, #head + 1), '^(%d+)|') or '0'
      local ours = 0
      if ARGV[9] ~= '1' and (redis.call('GET', KEYS[1]) == ARGV[1] or tonumber(d) < tonumber(ARGV[10])) then
        ours = 1
      end
      return {d, ours}
    end
  end
end
local now_ms, now_us = dlock_now()
local duration = now_ms - tonumber(ARGV[3])
if duration < 0 then duration = 0 end
local bad = dlock_check_lock_keys(KEYS) or dlock_check_type(KEYS[7], 'list') or dlock_check_type(KEYS[8], 'string')
if bad then return bad end
dlock_history(KEYS[7], ARGV[5], ARGV[6], ARGV[2], ARGV[3], dlock_num(duration), ARGV[7], ARGV[8])
redis.call('SET', KEYS[8], dlock_num(now_ms), 'PX', FENCE_TTL_MS)
local ours = 0
if ARGV[9] ~= '1' and redis.call('GET', KEYS[1]) == ARGV[1] then
  ours = 1
  local keep = tonumber(ARGV[3]) + tonumber(ARGV[4]) - now_ms
  if keep > 0 then
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[3], keep)
  else
    if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
  end
end
return {dlock_num(duration), ours}
