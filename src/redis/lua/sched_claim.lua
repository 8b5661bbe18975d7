-- sched_claim.lua: claim one tick of a scheduled job (cron or fixed rate).
-- KEYS: 1-5 the job lock's keys, 6 last claimed tick, 7 history, 8 the job's
--       state (a HASH, job_set.lua: paused_by/_reason/_at, trigger, manual).
-- ARGV: 1 tick_ms, 2 token, 3 lock_at_most_for_ms, 4 node, 5 allow overlap ('1'/'0'),
--       6 history length, 7 how far ahead of the server clock a tick may be (ms),
--       8 '1': claim the pending manual trigger instead of a tick.
-- A tick is claimed at most once: a node whose clock lags finds it taken. The
-- job lock keeps runs from overlapping; a tick that finds it held is consumed
-- as skipped. A tick further ahead of the server's clock than ARGV[7] is
-- refused: it comes from a node whose clock is wrong, and claiming it would
-- make every node skip the ticks before it.
-- Returns {1, fence, start_ms, pending}, {0, 'claimed', node, pending},
-- {0, 'busy', holder, pending}, {0, 'paused', why} or {0, 'ahead', server now_ms};
-- 'pending' is '1' when a manual trigger waits. A paused job's tick is consumed
-- and recorded as skipped. A manual claim returns {1, fence, start_ms,
-- trigger_ms}, {0, 'none', ''} (no trigger pending) or {0, 'busy', holder}
-- (the trigger stays pending); it runs even while the job is paused.
-- Safe to run twice: the tick record names the claiming run's token, so a
-- second run of the same claim (its reply was lost) gets the first one's answer.
-- A key of the wrong type is refused by name before anything is written,
-- with one TYPE a key at most, and only for the keys this claim's path
-- reads or writes: most claims of a fleet find the tick claimed and read
-- three keys (issue 30: a claim used to check all eight first).
local tick, ahead = tonumber(ARGV[1]), tonumber(ARGV[7])
local WANT = {'string', 'string', 'hash', 'zset', 'hash', 'string', 'list', 'hash'}
local checked = {}
local function check(...)
  for _, i in ipairs({...}) do
    if not checked[i] then
      checked[i] = true
      local bad = dlock_check_type(KEYS[i], WANT[i])
      if bad then return bad end
    end
  end
  return nil
end
local bad = check(6, 8)
if not bad and ARGV[5] ~= '1' then bad = check(1) end
if bad then return bad end
local manual = ARGV[8] == '1'
-- Every other path reads or writes the job lock's keys or the history.
local function check_all() return check(1, 2, 3, 4, 5, 6, 7, 8) end
-- Start the claimed run with fence f: take the job lock, or with overlap
-- (no job lock) keep the record of a mutex of this name that may be held
-- meanwhile (dlock run JOB, a node still running the job without overlap).
local function start_run(f, now_ms, now_us)
  if ARGV[5] == '1' then
    dlock_hold_park(KEYS)
    redis.call('SET', KEYS[2], f, 'PX', FENCE_TTL_MS)
  else
    dlock_take(KEYS, ARGV[2], tonumber(ARGV[3]), ARGV[4], now_ms, now_us, f)
  end
end
-- The job lock holding this run's token (fresh for every claim) means a first
-- run of this same claim took it: ours, even if another node has claimed a
-- later tick since (it found the lock held and skipped that tick).
if ARGV[5] ~= '1' and redis.call('GET', KEYS[1]) == ARGV[2] then
  bad = check_all()
  if bad then return bad end
  local f, since = dlock_hold_of(KEYS, ARGV[2])
  if manual then return {1, f or '0', since or '0', dlock_manual_at(KEYS[8], ARGV[2])} end
  return {1, f or '0', since or '0', dlock_pending(KEYS[8])}
end
local now_ms, now_us = dlock_now()
if manual then
  bad = check_all()
  if bad then return bad end
  local at = dlock_manual_at(KEYS[8], ARGV[2])
  if at ~= '' then -- a second send of this claim, with overlap (no job lock)
    return {1, dlock_fence_of(redis.call('GET', KEYS[2]) or '0'), dlock_num(now_ms), at}
  end
  local trig = redis.call('HGET', KEYS[8], 'trigger')
  if not trig then return {0, 'none', ''} end
  if ARGV[5] ~= '1' and redis.call('GET', KEYS[1]) then
    return {0, 'busy', select(3, dlock_hold_of(KEYS, redis.call('GET', KEYS[1]))) or '?'}
  end
  local f, err = dlock_fence_next(KEYS[2], now_us)
  if not f then return err end
  local id
  at, id = string.match(trig, '^(%d+)|.*|([^|]*)$')
  at = at or dlock_num(now_ms)
  redis.call('HDEL', KEYS[8], 'trigger')
  redis.call('HSET', KEYS[8], 'manual', at .. '|' .. (id or '') .. '|' .. ARGV[2])
  start_run(f, now_ms, now_us)
  return {1, f, dlock_num(now_ms), at}
end
if tick > now_ms + ahead then return {0, 'ahead', dlock_num(now_ms)} end
local last, who, owner = dlock_last_tick(KEYS[6])
if last == tick and owner == ARGV[2] then
  bad = check_all()
  if bad then return bad end
  if ARGV[5] == '1' then -- no job lock: the fence is the last one issued, the start is now
    return {1, dlock_fence_of(redis.call('GET', KEYS[2]) or '0'), dlock_num(now_ms), dlock_pending(KEYS[8])}
  end
  return {0, 'busy', select(3, dlock_hold_of(KEYS, redis.call('GET', KEYS[1]))) or '?', dlock_pending(KEYS[8])}
end
if last > now_ms + ahead then
  -- Claimed by a node whose clock ran ahead (a dlock without this check).
  -- Trust it only for the ticks that can have been claimed before it was
  -- written (its 30-day expiry dates the write), so that ticks due now by the
  -- server's clock run.
  local pttl = redis.call('PTTL', KEYS[6])
  last = 0
  if pttl > 0 then last = now_ms - (FENCE_TTL_MS - pttl) + ahead end
end
if last >= tick then return {0, 'claimed', who, dlock_pending(KEYS[8])} end
bad = check_all()
if bad then return bad end
local why = dlock_paused_why(KEYS[8])
if why then
  -- Consumed, so that it is recorded once; the token is marked so that a
  -- second send of this claim finds the tick claimed, not its own.
  redis.call('SET', KEYS[6], dlock_num(tick) .. '|' .. ARGV[4] .. '|' .. ARGV[2] .. '|paused', 'PX', FENCE_TTL_MS)
  dlock_history(KEYS[7], ARGV[4], '0', dlock_num(tick), dlock_num(now_ms), '-1', string.sub(why, 1, 63), ARGV[6])
  return {0, 'paused', why}
end
local f, err = dlock_fence_next(KEYS[2], now_us)
if not f then return err end
redis.call('SET', KEYS[6], dlock_num(tick) .. '|' .. ARGV[4] .. '|' .. ARGV[2], 'PX', FENCE_TTL_MS)
if ARGV[5] ~= '1' and redis.call('GET', KEYS[1]) then
  local holder = select(3, dlock_hold_of(KEYS, redis.call('GET', KEYS[1]))) or '?'
  dlock_history(KEYS[7], ARGV[4], '0', dlock_num(tick), dlock_num(now_ms), '-1',
                'skipped: previous run still going', ARGV[6])
  return {0, 'busy', holder, dlock_pending(KEYS[8])}
end
start_run(f, now_ms, now_us)
return {1, f, dlock_num(now_ms), dlock_pending(KEYS[8])}
