-- force_unlock: delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]: the lock hash
-- ARGV[1]: the lock's release channel
--
-- Returns 1 if a lock was deleted, 0 if there was none
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], '0')
  return 1
end
return 0
