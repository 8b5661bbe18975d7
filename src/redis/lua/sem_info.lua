-- sem_info.lua: read-only view of a semaphore, shaped as info.lua's reply
-- with two more elements. ARGV: 1 token ('' for none). Returns {exists,
-- pttl, fence, since_ms, info, last issued fence, waiters, mine, used,
-- limit}: exists 1 while a permit is held; pttl: our permit's remaining ms
-- when 'mine', else until the last permit ends (-2: none); fence, since_ms
-- and info: the newest holder's (highest fence); used: permits held now.
return dlock_sem_info(KEYS, ARGV)
