-- force_unlock: free a lock whoever holds it, and wake its waiters. The fencing counter stays.
--
-- KEYS[1]: the lock hash (see acquire.lua)
-- ARGV[1]: the lock's release channel
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local owner = redis.call('HGET', KEYS[1], 'o')
if owner and owner ~= '' then
  redis.call('HSET', KEYS[1], 'o', '', 'c', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PUBLISH', ARGV[1], '0')
  return 1
end
return 0
