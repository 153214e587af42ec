-- fair_inspect: read a fair lock's state in one atomic step, for operators.
--
-- KEYS[1]: the lock string; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines
-- ARGV[1]: the caller's owner id (to find its place in the queue)
--
-- Returns {pttl, value, queued, position}: as inspect.lua, then the number of live waiters
-- (deadline not passed; at most the first 1000 are counted) and the caller's 0-based place
-- among them (-1 when it is not queued)
local now = ms(redis.call('TIME'))
local queued, position = 0, -1
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[2], 0, 999)) do
  local deadline = redis.call('ZSCORE', KEYS[3], waiter)
  if deadline and tonumber(deadline) > now then
    if waiter == ARGV[1] then
      position = queued
    end
    queued = queued + 1
  end
end
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]), queued, position}
