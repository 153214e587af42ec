-- sem_acquire: take n permits of a semaphore, each with its own lease.
--
-- KEYS[1]: the semaphore, a sorted set: permit id "<owner>:<k>" -> expiry (server clock, ms)
-- KEYS[2]: the semaphore's size, recorded while any permit is held
-- ARGV[1]: owner id (one per acquisition)
-- ARGV[2]: permits wanted, n >= 1
-- ARGV[3]: the semaphore's size as the caller knows it
-- ARGV[4]: lease in milliseconds
--
-- Returns a table answer (see engine/answer.rs):
--         {1}            taken (also the answer to a repeat of an acquisition already applied)
--         {0, 1, ms}     not enough free permits; ms (>= 1) until the first held permit's
--                        lease runs out
--         {2, recorded}  the permits held now were taken with another size; nothing taken
-- Expired permits (crashed holders) are dropped before counting: they come back by themselves.
local now = ms(redis.call('TIME'))
local n = tonumber(ARGV[2])
local size = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
-- A semaphore nobody holds (the common case) has no permit of a repeat to find, none to
-- drop and no size to check.
local held = redis.call('ZCARD', KEYS[1])
if held > 0 then
  local first = redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':1')
  if first and tonumber(first) > now then
    return {1}
  end
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end
if held > 0 then
  local recorded = redis.call('GET', KEYS[2])
  if recorded and tonumber(recorded) ~= size then
    return {2, tonumber(recorded)}
  end
end
if held + n > size then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, 1, math.max(1, tonumber(oldest[2]) - now)}
end
local expiry = string.format('%.0f', now + lease)
local args = {}
for k = 1, n do
  args[#args + 1] = expiry
  args[#args + 1] = ARGV[1] .. ':' .. k
end
redis.call('ZADD', KEYS[1], unpack(args))
if held == 0 then
  -- The set is new (an empty set is no key): its time to live is this lease.
  redis.call('PEXPIRE', KEYS[1], lease)
  redis.call('SET', KEYS[2], ARGV[3], 'PX', lease)
  return {1}
end
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', redis.call('PTTL', KEYS[1]))
return {1}
