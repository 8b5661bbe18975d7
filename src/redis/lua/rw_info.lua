-- rw_info.lua: read-only view of a read-write lock (status, is-held).
-- ARGV: 1 token ('' none). Returns {is_rwlock, readers, writer (0/1),
-- the writer's fence, its since_ms, its info, waiting writers, waiting
-- readers, last issued fence, pttl of the holders key, mine (0/1), my pttl}.
-- Counts only live holders and waiters (leases not ended).
return dlock_rw_info(KEYS, ARGV)
