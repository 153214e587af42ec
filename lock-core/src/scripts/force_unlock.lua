-- force_unlock: free a lock whoever holds it, and wake its waiters. The fencing counter stays.
--
-- KEYS[1]: the lock string
-- ARGV[1]: the lock's release channel
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local value, owner, count, token, released = read_lock(KEYS[1])
if value == false then
  return foreign()
end
if owner == '' then
  return 0
end
redis.call('SET', KEYS[1], lock_string('', 0, token, released, ''), 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[1], '0')
return 1
