-- info.lua: read-only view of a lock for status and is-held checks, for
-- every kind: a ZSET at the name is a read-write lock's holders (meta kind
-- 'rwlock') or a semaphore's permits, answered as rw_info.lua (12 elements)
-- or sem_info.lua (10) do; otherwise the mutex's answer (8).
-- ARGV: 1 token ('' for none). Returns {exists, pttl, fence, since_ms, info,
-- last issued fence, waiters, mine}; strings are '' when unknown.
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
  if redis.call('HGET', KEYS[3], 'kind') == 'rwlock' then return dlock_rw_info(KEYS, ARGV) end
  return dlock_sem_info(KEYS, ARGV)
end
local cur = redis.call('GET', KEYS[1])
local bad = dlock_check_lock_keys(KEYS)
if bad then return bad end
local f, since, info = dlock_hold_of(KEYS, cur)
local mine = 0
if cur and cur == ARGV[1] then mine = 1 end
return {cur and 1 or 0, redis.call('PTTL', KEYS[1]), f or '', since or '', info or '',
        dlock_fence_of(redis.call('GET', KEYS[2]) or ''), redis.call('ZCARD', KEYS[4]), mine}
