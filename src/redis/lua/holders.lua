-- holders.lua: every live hold of a semaphore or a read-write lock
-- (dlock_lock_holders): a flat list {fence, ms left, since_ms, owner info, ...}
-- in the order their leases end. Anything else: {}. Reads only.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then return {} end
local now_ms = dlock_now()
local rw = redis.call('HGET', KEYS[3], 'kind') == 'rwlock'
local out = {}
local held = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #held, 2 do
  local rec = redis.call('HGET', KEYS[3], (rw and 'h:' or 'p:') .. held[i]) or ''
  local f, s, o
  if rw then f, s, o = string.match(rec, '^[rw]|(%d+)|(%d*)|(.*)$')
  else f, s, o = string.match(rec, '^(%d+)|(%d*)|(.*)$') end
  out[#out + 1] = f or '0'
  out[#out + 1] = dlock_num(tonumber(held[i + 1]) - now_ms)
  out[#out + 1] = s or ''
  out[#out + 1] = o or ''
end
return out
