-- force_unlock: free a lock whoever holds it, and wake its waiters. The fencing counter stays.
--
-- KEYS[1]: the lock (see acquire.lua)
-- ARGV[1]: the lock's release channel
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local owner, count, token, released =
  string.match(value, '^([^|]*)|(%d+)|(%d+)|(%d*)|(1?)$')
if not owner then
  return redis.error_reply('WRONGTYPE the lock key holds a value lock-core did not write')
end
if owner == '' then
  return 0
end
redis.call('SET', KEYS[1], '|0|' .. token .. '|' .. released .. '|', 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[1], '0')
return 1
