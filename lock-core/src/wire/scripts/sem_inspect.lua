-- sem_inspect: read a semaphore's state in one atomic step, for operators.
--
-- KEYS[1]: the semaphore; KEYS[2]: its recorded size
--
-- Returns {now_ms, size, permit_1, expiry_1, ...}: the server clock, the recorded size
-- (nil while no permit is held), and every permit id with its expiry (ms, server clock)
local out = {ms(redis.call('TIME')), redis.call('GET', KEYS[2])}
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do
  out[#out + 1] = v
end
return out
