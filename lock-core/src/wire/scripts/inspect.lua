-- inspect: read a lock string's state in one atomic step, for operators.
--
-- KEYS[1]: the lock string
--
-- Returns {pttl, value}: the remaining lease in ms (-2: no key, -1: no expiry), and the value
-- "owner|count|token|released|waiters" (nil when there is no key)
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1])}
