-- sched_history.lua: the newest ARGV[1] entries of a job's run history (KEYS[1]).
local bad = dlock_check_type(KEYS[1], 'list')
if bad then return bad end
return redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
