-- release_keep: give back the last hold of a lock string while keeping the lock taken until
-- a minimum hold time has passed (`hold_at_least`): the lease is set to what is left of it,
-- and the lock expires then instead of being freed now. Still owner-checked; the fencing
-- token stays with the lock.
--
-- KEYS[1]: the lock string
-- ARGV[1]: owner id
-- ARGV[2]: what is left of the minimum hold, in milliseconds (>= 1)
--
-- Returns 1  kept: the lock expires in ARGV[2] ms (also the answer to a repeat)
--         0  the owner does not hold the lock (expired, taken over or force-unlocked)
local value, owner = parse_lock(redis.call('GET', KEYS[1]))
if value == false then
  return foreign()
end
if owner ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
