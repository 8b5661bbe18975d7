-- rl_marker.lua: Redlock's restart marker on one node (docs/redlock.md,
-- "Restarts"). KEYS[1]: the marker, dlock:redlock:marker (one key per
-- database, whatever the key prefix), a hash: 'since' = this node's clock
-- (server TIME, µs) when a client first found the node without a marker,
-- 'counts' = '1' once the node counts toward quorums, 'lease' = the longest
-- lease (ms) a client announced, 'look' = how long (ms) the look that wrote
-- it may race another client's (its command timeout): a held-out marker
-- older than that, on this node's clock, is no racing first look. A node that loses its data loses the
-- marker: the next client to look holds it out from then on, on its own
-- clock, for the longest lease.
-- ARGV: 1 'r' (read) or 'p' (promote), 2 the longest lease the client knows
--       (ms), 3 (promote) the 'since' values the client read on the nodes it
--       found fit to count, comma-separated; (read) the client's look
--       window (ms).
-- read: where the marker is missing, write it (not counting, since now);
-- record a longer lease. Returns {counts, since, now, lease, look} (look ''
-- on a marker written without one: an older client's); counts is -1
-- where there was no marker (written now), 1 where it counts, 2 where a
-- renewal wrote the record (rl_extend.lua: a lock was held across the
-- loss), 0 held out. Any marker found (0, 1, 2) says the deployment is in
-- use: it is new only where every node answers -1 (topo_redlock.c).
-- promote (sent by an acquire that took its lock): counts = '1' when the
-- marker is the one the client read (its 'since' is in ARGV[3]): never
-- onto a node emptied since; a marker left held out gets the record
-- 'renewed' (a lock held while it was out). Returns 1 when the node counts,
-- 0 when not.
local k = KEYS[1]
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local ty = redis.call('TYPE', k)['ok']
if ty == 'zset' then
  -- The first marker (a sorted set of the longest leases): the node kept its data.
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('DEL', k)
  redis.call('HSET', k, 'since', '0', 'counts', '1', 'lease', top[2] or '0')
elseif ty ~= 'hash' and ty ~= 'none' then
  return redis.error_reply('WRONGTYPE the Redlock restart marker ' .. k .. ' holds a ' .. ty ..
    ', expected a hash: delete it (DEL ' .. k .. ') while no Redlock lock is held')
end
local h = redis.call('HMGET', k, 'since', 'counts', 'lease', 'renewed', 'look')
local want, had = tonumber(ARGV[2]) or 0, tonumber(h[3] or '') or 0
if ARGV[1] == 'p' then
  if h[2] == '1' then return 1 end
  if h[1] and string.find(',' .. ARGV[3] .. ',', ',' .. h[1] .. ',', 1, true) then
    redis.call('HSET', k, 'counts', '1')
    return 1
  end
  -- Held out at an acquire that took its lock: the deployment is in use,
  -- whatever this marker's age reads on a clock stepped since (review 5).
  if h[1] then redis.call('HSET', k, 'renewed', '1') end
  return 0
end
if not h[1] then
  redis.call('HSET', k, 'since', now, 'counts', '0', 'lease', ARGV[2], 'look', ARGV[3] or '')
  return {-1, now, now, ARGV[2], ARGV[3] or ''}
end
local lease = h[3] or '0'
if want > had then
  redis.call('HSET', k, 'lease', ARGV[2])
  lease = ARGV[2]
end
return {h[2] == '1' and 1 or (h[4] == '1' and 2 or 0), h[1], now, lease, h[5] or ''}
