-- proclaim.lua: an election's leader changes its value (the owner info of
-- its mutex hold) without giving up the hold: fence, since and lease stay.
-- ARGV: 1 token, 2 the new value. Returns 1 written, 0 the token does not
-- hold the lock (nothing written). Twice-safe: the same value again.
-- pcall: another kind's ZSET at the name is another owner's.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local bad = dlock_check_lock_keys(KEYS)
if bad then return bad end
local v = redis.call('GET', KEYS[2])
if v then
  local f, since, tok = string.match(v, '^(%d+)|(%d+)|(%x+)|')
  if tok == ARGV[1] then
    redis.call('SET', KEYS[2], dlock_hold_record(f, since, tok, ARGV[2]), 'PX', FENCE_TTL_MS)
    return 1
  end
end
-- The record parked in the meta hash (dlock_hold_park), or an older
-- client's: written where dlock_hold_of reads it.
local m = redis.pcall('HMGET', KEYS[3], 'fence', 'token')
if not m.err and m[1] and (not m[2] or m[2] == ARGV[1]) then
  redis.call('HSET', KEYS[3], 'info', ARGV[2])
  return 1
end
return 0
