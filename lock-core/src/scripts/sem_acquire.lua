-- sem_acquire: take n permits of a semaphore, each with its own lease.
--
-- KEYS[1]: the semaphore, a sorted set: permit id "<owner>:<k>" -> expiry (server clock, ms)
-- ARGV[1]: owner id (one per acquisition)
-- ARGV[2]: permits wanted, n >= 1
-- ARGV[3]: the semaphore's size (every user of the name must pass the same)
-- ARGV[4]: lease in milliseconds
--
-- Returns 1     taken (also the answer to a repeat of an acquisition already applied)
--         -ms   not enough free permits; ms (>= 1) until the first held permit's lease runs out
-- Expired permits (crashed holders) are dropped before counting: they come back by themselves.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[2])
local size = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local first = redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':1')
if first and tonumber(first) > now then
  return 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) + n > size then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return -math.max(1, tonumber(oldest[2]) - now)
end
local expiry = string.format('%.0f', now + lease)
local args = {}
for k = 1, n do
  args[#args + 1] = expiry
  args[#args + 1] = ARGV[1] .. ':' .. k
end
redis.call('ZADD', KEYS[1], unpack(args))
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
