-- fair_force_unlock: free a fair lock whoever holds it, and wake the head of its queue. The
-- fencing counter stays, and so does the queue: its waiters keep their turns.
--
-- KEYS[1]: the lock string; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines
-- ARGV[1]: the wake channel prefix: the head is woken on ARGV[1] .. <its owner id>
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local value, owner, _, token, released = read_lock(KEYS[1])
if value == false then
  return foreign()
end
if owner == '' then
  return 0
end
redis.call('SET', KEYS[1], lock_string('', 0, token, released, ''), 'PX', ARGV[2])
local now = ms(redis.call('TIME'))
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then
  redis.call('PUBLISH', ARGV[1] .. head, '0')
end
return 1
