-- release: give back one hold of a lock; the last one deletes it and wakes waiters.
--
-- KEYS[1]: the lock hash
-- KEYS[2]: the fencing counter hash
-- ARGV[1]: owner id
-- ARGV[2]: the hold count the caller believes the owner has now (>= 1)
-- ARGV[3]: the hold's fencing token
-- ARGV[4]: the lock's release channel
--
-- Returns 1  released: the lock was deleted and the release published
--         2  one hold given back; the owner still holds the lock
--         3  a retry of a release that was already applied (its first reply was lost)
--         0  the owner does not hold the lock (expired, taken over or force-unlocked)
local count = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if held == count then
  if count > 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
    return 2
  end
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HSET', KEYS[2], 'r', ARGV[3])
  end
  redis.call('PUBLISH', ARGV[4], ARGV[3])
  return 1
end
if held == nil then
  if count == 1 and redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
  end
  return 0
end
if held == count - 1 then
  return 3
end
return 0
