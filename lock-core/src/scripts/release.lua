-- release: give back one hold of a lock; the last one frees it and wakes waiters.
--
-- KEYS[1]: the lock hash (see acquire.lua)
-- ARGV[1]: owner id
-- ARGV[2]: the hold count the caller believes the owner has now (>= 1)
-- ARGV[3]: the hold's fencing token
-- ARGV[4]: the lock's release channel
-- ARGV[5]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1  released: the lock is free and the release was published
--         2  one hold given back; the owner still holds the lock
--         3  a repeat of a release that was already applied (its first reply was lost)
--         0  the owner does not hold the lock (expired, taken over or force-unlocked)
local lock = redis.call('HMGET', KEYS[1], 'o', 'c', 'r')
local expected = tonumber(ARGV[2])
if lock[1] == ARGV[1] then
  local count = tonumber(lock[2])
  if count == expected then
    if count > 1 then
      redis.call('HSET', KEYS[1], 'c', count - 1)
      return 2
    end
    redis.call('HSET', KEYS[1], 'o', '', 'c', 0, 'r', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    redis.call('PUBLISH', ARGV[4], ARGV[3])
    return 1
  end
  if count == expected - 1 then
    return 3
  end
  return 0
end
if expected == 1 and lock[3] == ARGV[3] then
  return 3
end
return 0
