-- inspect: read a lock's state in one atomic step, for operators.
--
-- KEYS[1]: the lock hash
--
-- Returns {pttl, {field1, value1, ...}}: the remaining lease in ms (-2: no lock, -1: no
-- expiry) and the hash (owner ids -> hold counts, "fence" -> the holder's fencing token)
return {redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[1])}
