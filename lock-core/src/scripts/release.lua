-- release: give back one hold of a lock; the last one frees it and wakes any waiters.
--
-- KEYS[1]: the lock (see acquire.lua)
-- ARGV[1]: owner id
-- ARGV[2]: the hold count the caller believes the owner has now (>= 1)
-- ARGV[3]: the hold's fencing token
-- ARGV[4]: the lock's release channel
-- ARGV[5]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1  released: the lock is free (and the release published if anyone waits)
--         2  one hold given back; the owner still holds the lock
--         3  a repeat of a release that was already applied (its first reply was lost)
--         0  the owner does not hold the lock (expired, taken over or force-unlocked)
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local owner, count, token, released, waiters =
  string.match(value, '^([^|]*)|(%d+)|(%d+)|(%d*)|(1?)$')
if not owner then
  return redis.error_reply('WRONGTYPE the lock key holds a value lock-core did not write')
end
count = tonumber(count)
local expected = tonumber(ARGV[2])
if owner == ARGV[1] then
  if count == expected then
    if count > 1 then
      redis.call('SET', KEYS[1],
        owner .. '|' .. (count - 1) .. '|' .. token .. '|' .. released .. '|' .. waiters, 'KEEPTTL')
      return 2
    end
    redis.call('SET', KEYS[1], '|0|' .. token .. '|' .. ARGV[3] .. '|', 'PX', ARGV[5])
    if waiters ~= '' then
      redis.call('PUBLISH', ARGV[4], ARGV[3])
    end
    return 1
  end
  if count == expected - 1 then
    return 3
  end
  return 0
end
if expected == 1 and released == ARGV[3] then
  return 3
end
return 0
