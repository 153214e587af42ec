-- sem_force_unlock: free every permit of a semaphore whoever holds them, and wake its
-- waiters. The recorded size goes with the permits (it is kept only while one is held).
--
-- KEYS[1]: the semaphore (see sem_acquire.lua); KEYS[2]: its recorded size
-- ARGV[1]: the semaphore's release channel
--
-- Returns 1 if a permit whose lease had not run out was freed, 0 if none was held
local now = ms(redis.call('TIME'))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
if held > 0 then
  redis.call('PUBLISH', ARGV[1], '0')
  return 1
end
return 0
