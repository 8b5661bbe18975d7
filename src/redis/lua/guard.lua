-- guard.lua: admit a write carrying fencing token ARGV[1] only if no higher
-- token was seen for this resource; record it. Tokens are decimal strings
-- without leading zeros, compared by length then digits (exact for 64 bits).
-- A token or recorded value that is no integer in 0..2^63-1 is an error: a
-- wrapped or corrupt value must not admit anyone.
-- KEYS[2] (optional; Sentinel and Cluster without WAIT, where a failover may
-- promote a replica that missed the last admissions): "<replid> <floor>",
-- the replication id of the master that wrote the guard last, and the fence
-- floor. When the master's id is another one (a replica was promoted, or the
-- server restarted), admissions may have been lost with the old master, so
-- the floor rises to the server clock in microseconds: a fence is never
-- below its master's clock when issued, so a token issued before the
-- failover is below it and one issued after is not (clocks agreeing).
-- Without the right to call INFO the check fails (NOPERM): unsure, no admission.
-- Returns {1, previous} when admitted, {0, highest} when stale, {0, floor, 1}
-- when stale under the floor.
local bad = dlock_check_type(KEYS[1], 'string')
if bad then return bad end
local cur = redis.call('GET', KEYS[1])
local t = ARGV[1]
if not dlock_fence_ok(t, FENCE_MAX) then
  return redis.error_reply('EFENCE token ' .. dlock_shown(t) .. ' is not a fencing token (an integer in 1..' ..
    FENCE_MAX .. ')')
end
if cur and not dlock_fence_ok(cur, FENCE_MAX) then
  return redis.error_reply('EFENCE guard key ' .. KEYS[1] .. ' holds ' .. dlock_shown(cur) ..
    ', not a fencing token (an integer in 0..' .. FENCE_MAX .. '), so no token can be compared with it. ' ..
    'Set it to the highest token really admitted for this resource, or delete it; see docs/errors.md')
end
local floor = nil
if KEYS[2] then
  local bad2 = dlock_check_type(KEYS[2], 'string')
  if bad2 then return bad2 end
  local info = redis.pcall('INFO', 'replication')
  if type(info) == 'table' then
    -- Refused (an ACL without @dangerous): unsure, so no admission.
    return redis.error_reply('NOPERM the guard needs INFO (replication) to tell a change of master (' ..
      tostring(info.err) .. '); grant it: ACL SETUSER <user> +info (see docs/keys.md), or use wait_replicas')
  end
  local id = string.match(info, 'master_replid:(%w+)') or '?'
  local rec = redis.call('GET', KEYS[2])
  local was
  if rec then was, floor = string.match(rec, '^(%S+) (%d+)$') end
  if not was or not dlock_fence_ok(floor, FENCE_MAX) then
    -- None yet (a guard older than this record keeps its value): start one.
    was, floor = id, '0'
    redis.call('SET', KEYS[2], id .. ' 0')
  end
  if was ~= id then
    local _, now_us = dlock_now()
    local now = dlock_num(now_us)
    if dlock_fence_lt(floor, now) then floor = now end
    redis.call('SET', KEYS[2], id .. ' ' .. floor)
  end
end
if cur and dlock_fence_lt(t, cur) and not (floor and dlock_fence_lt(cur, floor)) then return {0, cur} end
if floor and dlock_fence_lt(t, floor) then return {0, floor, 1} end
redis.call('SET', KEYS[1], t)
return {1, cur or ''}
