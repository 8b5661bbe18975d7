-- force_release.lua: admin delete of a lock whatever its owner; wakes the next waiter.
-- ARGV: 1 '1' to delete a key without dlock metadata too (another library's lock);
-- 2 (optional) a fence: only the hold of that fence goes (an election's eviction
-- of one term, dlock_election_evict), a mutex's only.
-- Returns 1 if a lock key was deleted, 0 if there was none, -1 (nothing done)
-- when the key has no dlock metadata and ARGV[1] is not '1', -2 (nothing done)
-- when ARGV[2] is given and the hold is another's (or not a mutex's).
-- A deleted dlock hold leaves a tombstone: field 'deleted' = its token in the
-- waiters hash {K}:waiters (never a waiter id), for as long as the lease had left. The holder's next
-- extend or release finds it and learns "deleted", not "expired".
-- A read-write lock's name (a ZSET, meta kind 'rwlock') ends every hold, as
-- dlock_rw_force (prelude.lua) does; a semaphore's is refused (WRONGTYPE, below).
local epoch = ARGV[2] or ''
if epoch ~= '' and redis.call('TYPE', KEYS[1])['ok'] == 'zset' then return -2 end
-- Tell the holders at once: a holder's client listens on "{K}:f" while it
-- holds (lock.c, every kind) and checks its holds on the message, instead of
-- running on until its next renewal. SUBSCRIBE or, on a cluster,
-- SSUBSCRIBE: publish both ways (a forced release is rare); pcall: no
-- channel rights (ACL), no SPUBLISH (Redis < 7) only delay the news to the
-- next renewal.
local function tell_holders()
  local ch = '{' .. KEYS[1] .. '}:f'
  redis.pcall('PUBLISH', ch, 'forced')
  redis.pcall('SPUBLISH', ch, 'forced')
end
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' and redis.call('HGET', KEYS[3], 'kind') == 'rwlock' then
  local r = dlock_rw_force(KEYS)
  if r == 1 then tell_holders() end
  dlock_event(KEYS, 'ev 1 1')
  return r
end
local bad = dlock_check_type(KEYS[1], 'string') or dlock_check_lock_keys(KEYS)
if bad then return bad end
-- Every hold dlock takes has a record (dlock_hold_of: the counter's, or an
-- older client's {K}:meta): a key without one was set by someone else, maybe
-- an application's data.
local cur, pttl = redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])
if ARGV[1] ~= '1' and cur and not dlock_hold_of(KEYS, cur) then
  return -1
end
if epoch ~= '' then
  if not cur then return 0 end
  if dlock_hold_of(KEYS, cur) ~= epoch then return -2 end
end
-- A hand-off overwrites the lock key; it is deleted only when nobody takes
-- over (while a cluster slot migrates, a script must not touch a key it
-- deleted). The tombstone tells the holder its key was deleted, not
-- expired (DLOCK_LOST_DELETED), for as long as its lease had left. An older
-- client's {K}:meta goes with the key.
local existed = cur and 1 or 0
if cur and pttl > 0 then
  redis.call('HSET', KEYS[5], 'deleted', cur)
  if redis.call('PTTL', KEYS[5]) < pttl then redis.call('PEXPIRE', KEYS[5], pttl) end
end
local now_ms, now_us = dlock_now()
if not dlock_grant_next(KEYS, now_ms, now_us) then redis.call('DEL', KEYS[1], KEYS[3]) end
if cur then tell_holders() end
dlock_event(KEYS, 'ev 1 1')
return existed
