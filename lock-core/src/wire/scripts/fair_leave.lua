-- fair_leave: a waiter that stopped waiting leaves the queue; if the lock is free, the new
-- head is woken.
--
-- KEYS[1]: the lock string; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines
-- ARGV[1]: owner id
-- ARGV[2]: the wake channel prefix (see fair_release.lua)
--
-- Returns 1 if the waiter was queued, 0 if not
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local value, owner = read_lock(KEYS[1])
if value ~= false and owner == '' then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if head then
    redis.call('PUBLISH', ARGV[2] .. head, '0')
  end
end
return removed
