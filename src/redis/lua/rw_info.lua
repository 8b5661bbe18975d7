-- rw_info.lua: read-only view of a read-write lock (status, is-held).
-- ARGV: 1 token ('' none). Returns {is_rwlock, readers, writer (0/1),
-- the writer's fence, its since_ms, its info, waiting writers, waiting
-- readers, last issued fence, pttl of the holders key, mine (0/1), my pttl}.
-- Counts only live holders and waiters (leases not ended).
local bad = rw_check(KEYS)
if bad then return bad end
local now_ms = dlock_now()
local readers, writer, wfence, wsince, winfo = 0, 0, '', '', ''
local w = redis.call('HGET', KEYS[3], 'writer')
for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
  if h == w then
    writer = 1
    local rec = redis.call('HGET', KEYS[3], 'h:' .. h) or ''
    local f, since, info = string.match(rec, '^w|(%d+)|(%d+)|(.*)$')
    wfence, wsince, winfo = f or '', since or '', info or ''
  else
    readers = readers + 1
  end
end
local ww, wr = 0, 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local rec = redis.call('HGET', KEYS[5], id)
    local exp, side
    if rec then exp, side = string.match(rec, '^(%d+)|([rw])|') end
    if exp and tonumber(exp) > now_ms then
      if side == 'w' then ww = ww + 1 else wr = wr + 1 end
    end
  end
end
local mine, myttl = 0, -2
if ARGV[1] ~= '' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if s and tonumber(s) > now_ms then
    mine = 1
    myttl = tonumber(s) - now_ms
  end
end
return {redis.call('EXISTS', KEYS[1]), readers, writer, wfence, wsince, winfo, ww, wr,
        redis.call('GET', KEYS[2]) or '', redis.call('PTTL', KEYS[1]), mine, myttl}
