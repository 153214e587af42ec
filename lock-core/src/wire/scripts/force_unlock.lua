-- force_unlock: free a lock whoever holds it, and wake its waiters. The fencing counter stays.
--
-- KEYS[1]: the lock string
-- ARGV[1]: the lock's release channel
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local freed = free_lock(KEYS[1], ARGV[2])
if freed == false then
  return foreign()
end
if freed == 1 then
  redis.call('PUBLISH', ARGV[1], '0')
end
return freed
