-- inspect: read a lock's state in one atomic step, for operators.
--
-- KEYS[1]: the lock hash (see acquire.lua)
--
-- Returns {pttl, {owner, count, token}}: the remaining lease in ms (-2: no hash, -1: no
-- expiry), then the owner ('' or nil when free), its hold count and the last fencing token
return {redis.call('PTTL', KEYS[1]), redis.call('HMGET', KEYS[1], 'o', 'c', 'f')}
