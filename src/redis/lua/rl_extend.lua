-- rl_extend.lua: Redlock renewal on one of its nodes: compare-and-pexpire,
-- and re-seed a node that lost the key (restarted empty, FLUSHALL) with our
-- token, only where the key is absent (SET NX): another owner's key is never
-- touched. The quorum decides whether the renewal counts (topo_redlock.c).
-- KEYS[#KEYS]: the restart marker (rl_marker.lua). A node found without it
-- lost its data: its quarantine starts here ('since' = now, not counting),
-- so that the deployment never looks new while this node carries the record
-- (docs/redlock.md, "Restarts"); a marker held out (written by a look)
-- gets the renewal's record ('renewed') where our key is re-seeded. Never
-- the marker that counts: that would
-- launder the node for the other locks it lost.
-- ARGV: 1 token, 2 lease_ms. Returns 1 extended, 3 re-seeded on a node whose
-- marker counts (it kept its data: it counts toward the renewal's majority),
-- 2 re-seeded elsewhere, -1 another owner.
local mk = KEYS[#KEYS]
local marked = redis.call('TYPE', mk)['ok'] == 'hash' and redis.call('HGET', mk, 'counts') == '1'
if redis.call('EXISTS', mk) == 0 then
  local t = redis.call('TIME')
  redis.call('HSET', mk, 'since', t[1] .. string.rep('0', 6 - #t[2]) .. t[2], 'counts', '0', 'lease', ARGV[2],
    'renewed', '1')
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], FENCE_TTL_MS) -- the hold's record (extend.lua)
  return 1
end
if cur then return -1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- A held-out node re-seeded: a lock was held across its loss, so the
  -- deployment is in use however young its marker (topo_redlock.c).
  if not marked and redis.call('TYPE', mk)['ok'] == 'hash' then redis.call('HSET', mk, 'renewed', '1') end
  return marked and 3 or 2
end
return -1
