-- job_get.lua: a scheduled job's state (job_set.lua).
-- KEYS: 1 the job's state (HASH), 2 its last claimed tick.
-- Returns {paused_by or '', paused_reason, paused_at, trigger ("at|by|id") or '',
-- last claimed tick record or ''}.
local bad = dlock_check_type(KEYS[1], 'hash') or dlock_check_type(KEYS[2], 'string')
if bad then return bad end
local h = redis.call('HMGET', KEYS[1], 'paused_by', 'paused_reason', 'paused_at', 'trigger')
return {h[1] or '', h[2] or '', h[3] or '', h[4] or '', redis.call('GET', KEYS[2]) or ''}
