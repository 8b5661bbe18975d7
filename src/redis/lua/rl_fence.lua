-- rl_fence.lua: Redlock's fence write-back (an ABD-style register): raise
-- this node's counter to F, the highest fence the acquiring majority
-- reported, so that any later majority sees F or more; record F as this
-- hold's fence when the key is still ours. Safe to run twice.
-- ARGV: 1 fence F (canonical decimal), 2 token. Returns 1: the counter holds F or more.
if not dlock_fence_ok(ARGV[1], FENCE_MAX) then
  return redis.error_reply('EFENCE fence ' .. dlock_shown(ARGV[1]) .. ' is not an integer in 1..' .. FENCE_MAX)
end
local bad = dlock_check_type(KEYS[2], 'string') or dlock_check_type(KEYS[3], 'hash')
if bad then return bad end
local cur = redis.call('GET', KEYS[2])
local last = cur and dlock_fence_of(cur)
if cur and not dlock_fence_ok(last, FENCE_MAX) then
  return redis.error_reply('EFENCE fence counter ' .. KEYS[2] .. ' holds ' .. dlock_shown(cur) ..
    ', not an integer in 0..' .. FENCE_MAX .. '; see docs/errors.md')
end
if not cur or dlock_fence_lt(last, ARGV[1]) then
  -- While the key is ours, the counter holds our hold's record (this node's
  -- acquire wrote it): it keeps it, with F as the hold's fence.
  local since, tok, info = string.match(cur or '', '^%d+|(%d+)|(%x+)|(.*)$')
  if tok == ARGV[2] and redis.call('GET', KEYS[1]) == ARGV[2] then
    redis.call('SET', KEYS[2], dlock_hold_record(ARGV[1], since, tok, info), 'PX', FENCE_TTL_MS)
  else
    -- Our hold here ended and another took the key meanwhile: keep its record.
    if tok then dlock_hold_park(KEYS) end
    redis.call('SET', KEYS[2], ARGV[1], 'PX', FENCE_TTL_MS)
  end
end
return 1
