-- sem_extend.lua: set the lease of our permit to ARGV[2] ms from now, only
-- while the permit is there and unexpired (an expired permit is never
-- revived). ARGV: 1 token, 2 lease_ms. Returns 1 extended, 0 gone.
local now_ms = dlock_now()
-- pcall: a name that is not a set of permits (another kind's now) holds no
-- permit of ours: 0, not a WRONGTYPE error.
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(s) == 'table' or not s or tonumber(s) <= now_ms then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], last)
redis.call('PEXPIREAT', KEYS[3], last)
return 1
