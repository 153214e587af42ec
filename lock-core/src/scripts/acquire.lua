-- acquire: take a lock, or re-enter one this owner already holds.
--
-- KEYS[1]: the lock hash: o -> owner id ('' when free), c -> hold count,
--          f -> the last fencing token issued, r -> the token of the last full release
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the hold count the caller believes the owner has now (0 for a fresh acquisition)
--
-- Returns {1, token}  acquired; also the answer to a repeat of an acquisition already applied
--         {0, pttl}   held by another owner; pttl = its remaining lease in ms (-1: none)
--         {-1, held}  the owner's hold count is neither ARGV[3] nor ARGV[3] + 1: the hold was lost
--
-- The token is f + 1, or, when the hash is gone (never used, expired), the server clock in
-- microseconds. Every token is at most its issue time in microseconds (Redis runs fewer than
-- one script per microsecond), and a hash is gone for at least a lease before it is seeded
-- again, so tokens only grow as long as the server clock does not step back by more than that.
local lock = redis.call('HMGET', KEYS[1], 'o', 'c', 'f')
local owner = lock[1]
local expected = tonumber(ARGV[3])
if not owner or owner == '' then
  if expected ~= 0 then
    return {-1, 0}
  end
  local token = tonumber(lock[3])
  if token then
    token = token + 1
  else
    local now = redis.call('TIME')
    token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'c', 1, 'f', string.format('%.0f', token))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
if owner ~= ARGV[1] then
  if expected ~= 0 then
    return {-1, 0}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local count = tonumber(lock[2])
if count == expected then
  redis.call('HSET', KEYS[1], 'c', count + 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
elseif count ~= expected + 1 then
  return {-1, count}
end
return {1, tonumber(lock[3])}
