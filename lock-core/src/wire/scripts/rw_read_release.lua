-- rw_read_release: give back one read share; the last reader out wakes waiting writers.
--
-- KEYS[1]: the readers (see rw_read.lua)
-- ARGV[1]: owner id
-- ARGV[2]: the read count the caller believes the owner has now (>= 1)
-- ARGV[3]: the lock's release channel
--
-- Returns 1 released, 2 one share given back (still reading), 3 a repeat of an applied
-- partial release, 0 not held (expired, purged). A repeat of a final release whose reply was
-- lost also answers 0: a missing share cannot tell "released" from "expired", and claiming it
-- was held when it may have expired would be the worse mistake.
local now = ms(redis.call('TIME'))
local expected = tonumber(ARGV[2])
local mine = redis.call('HGET', KEYS[1], ARGV[1])
local count, expiry = 0, 0
if mine then
  local c, e = string.match(mine, '^(%d+)|(%d+)$')
  count, expiry = tonumber(c), tonumber(e)
end
if count == expected and expiry > now then
  if count > 1 then
    redis.call('HSET', KEYS[1], ARGV[1], (count - 1) .. '|' .. expiry)
    return 2
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('PUBLISH', ARGV[3], '1')
  return 1
end
if count >= 1 and count == expected - 1 then
  return 3
end
if mine then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('PUBLISH', ARGV[3], '1')
end
return 0
