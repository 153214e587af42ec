-- acquire: take a lock, or re-enter one this owner already holds.
--
-- KEYS[1]: the lock hash (owner id -> hold count; field "fence" -> the holder's fencing token)
-- KEYS[2]: the fencing counter hash (field "n" -> last token issued, "r" -> token of the last release)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the hold count the caller believes the owner has now (0 for a fresh acquisition)
-- ARGV[4]: time to live of a newly created fencing counter, in milliseconds
--
-- Returns {1, token}  acquired; also the answer to a retry of an acquisition already applied
--         {0, pttl}   held by another owner; pttl = the holder's remaining lease in ms (-1: none)
--         {-1, held}  the owner's hold count is not ARGV[3] (or ARGV[3] + 1): the hold was lost
--
-- A fresh counter is seeded from the server clock in microseconds. Redis runs fewer than one
-- script per microsecond, so a counter recreated after expiry starts above every token issued
-- by the one before, as long as the server clock does not step back by more than its TTL.
local count = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then
  if count ~= 0 then
    return {-1, 0}
  end
  local token = redis.call('HINCRBY', KEYS[2], 'n', 1)
  if token == 1 then
    local now = redis.call('TIME')
    local seed = now[1] .. string.format('%06d', tonumber(now[2]))
    redis.call('HSET', KEYS[2], 'n', seed)
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
    token = tonumber(seed)
  end
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if held == nil then
  if count ~= 0 then
    return {-1, 0}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if held == count then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
elseif held ~= count + 1 then
  return {-1, held}
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
