-- sem_info.lua: read-only view of a semaphore, shaped as info.lua's reply
-- with two more elements. ARGV: 1 token ('' for none). Returns {exists,
-- pttl, fence, since_ms, info, last issued fence, waiters, mine, used,
-- limit}: exists 1 while a permit is held; pttl: our permit's remaining ms
-- when 'mine', else until the last permit ends (-2: none); fence, since_ms
-- and info: the newest holder's (highest fence); used: permits held now.
local bad = dlock_sem_check(KEYS, nil)
if bad then return bad end
local now_ms = dlock_now()
local held = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
local fence, since, info, pttl, mine = '', '', '', -2, 0
for i = 1, #held, 2 do
  local left = tonumber(held[i + 1]) - now_ms
  if held[i] == ARGV[1] then mine = 1 end
  if mine == 0 and left > pttl then pttl = left end
  local rec = redis.call('HGET', KEYS[3], 'p:' .. held[i])
  local f, s, o = string.match(rec or '', '^(%d+)|(%d*)|(.*)$')
  if f and (fence == '' or dlock_fence_lt(fence, f)) then fence, since, info = f, s, o end
end
if mine == 1 then pttl = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) - now_ms end
return {#held > 0 and 1 or 0, pttl, fence, since, info, redis.call('GET', KEYS[2]) or '',
        redis.call('ZCARD', KEYS[4]), mine, #held / 2, redis.call('HGET', KEYS[3], 'limit') or ''}
